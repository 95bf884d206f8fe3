// safetensors checkpoints: memory-mapped reading of single files and sharded folders
// (model.safetensors.index.json), and writing (the CLI's outputs, tests' checkpoints).
// Every malformed input raises deepinfer::Error naming the file and, where known, the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace deepinfer::io {

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the memory map; valid while the file is open
  size_t nbytes = 0;
  std::string file;               // the file it lives in, for error messages
  int64_t numel() const;
};

// One .safetensors file, memory-mapped read-only.
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint: a single .safetensors file, a folder with model.safetensors, a folder
// with model.safetensors.index.json (shards), or else a folder with *.safetensors files.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);
  bool contains(const std::string& name) const;
  // Throws "<dir>: tensor '<name>' not found" when missing.
  const TensorView& get(const std::string& name) const;
  // Also checks dtype and shape; the error names file, tensor, expected and found.
  const TensorView& get(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
  // Any float dtype (F32/F16/BF16/F8_E4M3/F8_E8M0) converted to fp32, checking the shape.
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& shape) const;
  std::vector<std::string> names() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;  // exactly numel * bits / 8 bytes
};

// Writes a safetensors file (tensors sorted by name, 8-byte aligned header), atomically via rename.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace deepinfer::io
