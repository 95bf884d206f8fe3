// safetensors_dump FILE: prints {"metadata": {...}, "tensors": {name: {dtype, shape, values?}}} as JSON,
// with fp32 values for the dtypes Checkpoint::read_f32 accepts. Used by test_safetensors_python.py.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

int main(int argc, char** argv) {
  using namespace deepinfer;
  if (argc != 2) {
    std::cerr << "usage: safetensors_dump FILE\n";
    return 2;
  }
  try {
    const io::Checkpoint c = io::Checkpoint::open(argv[1]);
    nlohmann::json out = {{"metadata", io::SafetensorsFile::open(argv[1])->metadata()},
                          {"tensors", nlohmann::json::object()}};
    for (const std::string& name : c.names()) {
      const io::TensorView& t = c.get(name);
      nlohmann::json& j = out["tensors"][name];
      j = {{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}};
      const DType readable[] = {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E8M0};
      if (std::find(std::begin(readable), std::end(readable), t.dtype) != std::end(readable))
        j["values"] = c.read_f32(name, t.shape);
    }
    std::cout << out.dump() << "\n";
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
