#include "vision/image_decode.h"

#include <png.h>
#include <webp/decode.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"

namespace deepinfer::vision {
namespace {

bool starts_with(std::span<const uint8_t> b, const char* magic, size_t at = 0) {
  const size_t n = std::strlen(magic);
  return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
}

// The format's name when the bytes look like an image DeepInfer does not read, else "".
const char* unsupported_format(std::span<const uint8_t> b) {
  if (starts_with(b, "GIF87a") || starts_with(b, "GIF89a")) return "GIF";
  if (starts_with(b, "BM")) return "BMP";
  if (starts_with(b, "II*") || starts_with(b, "MM")) return "TIFF";
  if (starts_with(b, "ftyp", 4)) return "HEIF/AVIF";
  return "";
}

void check_size(int64_t w, int64_t h, const std::string& what) {
  check(w > 0 && h > 0, what, ": image has no pixels (", w, "x", h, ")");
  check(w * h <= kMaxImagePixels, what, ": image of ", w, "x", h, " pixels exceeds the limit of ", kMaxImagePixels,
        " pixels");
}

// libpng and libjpeg report errors by longjmp: the setjmp frames below hold no C++ objects with
// destructors, and the image they fill belongs to the caller.
struct PngSource {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
  char error[256] = {};
  std::jmp_buf jump;
};

void png_read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* s = static_cast<PngSource*>(png_get_io_ptr(png));
  if (s->pos + n > s->bytes.size()) png_error(png, "truncated file");
  std::memcpy(out, s->bytes.data() + s->pos, n);
  s->pos += n;
}

void png_on_error(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(s->error, sizeof s->error, "%s", msg);
  std::longjmp(s->jump, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

// Returns false with s.error set on a libpng error.
bool decode_png_into(PngSource& s, RgbImage& img, png_structp png, png_infop info, std::vector<png_bytep>& rows) {
  if (setjmp(s.jump)) return false;
  png_set_read_fn(png, &s, png_read_bytes);
  png_set_user_limits(png, 1u << 20, 1u << 20);
  png_read_info(png, info);
  const auto w = static_cast<int64_t>(png_get_image_width(png, info));
  const auto h = static_cast<int64_t>(png_get_image_height(png, info));
  if (w <= 0 || h <= 0 || w * h > kMaxImagePixels) {
    std::snprintf(s.error, sizeof s.error, "image of %lldx%lld pixels exceeds the limit of %lld pixels",
                  static_cast<long long>(w), static_cast<long long>(h), static_cast<long long>(kMaxImagePixels));
    return false;
  }
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  // 16-bit gray opens in Pillow as I;16, whose conversion to RGB clips at 255 (not the high byte).
  const bool gray16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !gray16) png_set_strip_16(png);  // the high byte, as Pillow's ;16B unpackers
  if (!(color & PNG_COLOR_MASK_COLOR) && !gray16) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);  // convert("RGB") drops alpha and tRNS, it does not composite
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(w) * (gray16 ? 2 : 3)) {
    std::snprintf(s.error, sizeof s.error, "unexpected PNG layout after conversion to RGB");
    return false;
  }
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w * h * 3));
  rows.resize(static_cast<size_t>(h));
  for (int64_t y = 0; y < h; ++y) rows[y] = img.rgb.data() + y * w * 3;  // 2 bytes a pixel fit in 3
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  if (gray16)
    for (int64_t y = 0; y < h; ++y) {
      uint8_t* r = rows[y];
      for (int64_t x = w - 1; x >= 0; --x) {  // in place, right to left: 2-byte samples into 3-byte pixels
        const int v = (r[2 * x] << 8) | r[2 * x + 1];
        r[3 * x] = r[3 * x + 1] = r[3 * x + 2] = static_cast<uint8_t>(v > 255 ? 255 : v);
      }
    }
  return true;
}

RgbImage decode_png(std::span<const uint8_t> bytes, const std::string& what) {
  PngSource s{bytes};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_on_error, png_on_warning);
  check(png != nullptr, what, ": cannot start the PNG decoder");
  png_infop info = png_create_info_struct(png);
  RgbImage img;
  std::vector<png_bytep> rows;
  const bool ok = info != nullptr && decode_png_into(s, img, png, info, rows);
  png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  check(ok, what, ": corrupt or truncated PNG (", s.error, ")");
  return img;
}

struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char error[JMSG_LENGTH_MAX] = {};
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->error);
  std::longjmp(e->jump, 1);
}

// A premature end of data is an error (Pillow refuses truncated files); other warnings are not.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(cinfo);
}

bool decode_jpeg_into(JpegErrors& e, jpeg_decompress_struct& cinfo, std::span<const uint8_t> bytes, RgbImage& img,
                      const char*& refusal) {
  if (setjmp(e.jump)) return false;
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    refusal = "CMYK JPEG images are not supported";
    return false;
  }
  const int64_t w = cinfo.image_width, h = cinfo.image_height;
  if (w <= 0 || h <= 0 || w * h > kMaxImagePixels) {
    refusal = "image exceeds the pixel limit";
    return false;
  }
  cinfo.out_color_space = JCS_RGB;  // libjpeg's own YCbCr/gray -> RGB, as Pillow asks it
  jpeg_start_decompress(&cinfo);
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w * h * 3));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img.rgb.data() + static_cast<int64_t>(cinfo.output_scanline) * w * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& what) {
  jpeg_decompress_struct cinfo{};
  JpegErrors e{};
  cinfo.err = jpeg_std_error(&e.mgr);
  e.mgr.error_exit = jpeg_on_error;
  e.mgr.emit_message = jpeg_on_message;
  RgbImage img;
  const char* refusal = nullptr;
  const bool ok = decode_jpeg_into(e, cinfo, bytes, img, refusal);
  jpeg_destroy_decompress(&cinfo);
  if (refusal) fail(what, ": ", refusal);
  check(ok, what, ": corrupt or truncated JPEG (", e.error, ")");
  return img;
}

RgbImage decode_webp(std::span<const uint8_t> bytes, const std::string& what) {
  WebPBitstreamFeatures f;
  const VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &f);
  check(st == VP8_STATUS_OK, what, ": corrupt or truncated WebP (status ", static_cast<int>(st), ")");
  check(!f.has_animation, what, ": animated WebP images are not supported");
  check_size(f.width, f.height, what);
  RgbImage img{f.width, f.height, std::vector<uint8_t>(static_cast<size_t>(f.width) * f.height * 3)};
  // MODE_RGB drops alpha without premultiplying, as Pillow's RGBA -> RGB.
  check(WebPDecodeRGBInto(bytes.data(), bytes.size(), img.rgb.data(), img.rgb.size(), static_cast<int>(f.width * 3)),
        what, ": corrupt or truncated WebP");
  return img;
}

}  // namespace

RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& what) {
  RgbImage img;
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) {
    img = decode_png(bytes, what);
  } else if (starts_with(bytes, "\xff\xd8\xff")) {
    img = decode_jpeg(bytes, what);
  } else if (starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8)) {
    img = decode_webp(bytes, what);
  } else if (const char* other = unsupported_format(bytes); *other) {
    fail(what, ": ", other, " images are not supported (PNG, JPEG and WebP are)");
  } else {
    fail(what, ": not an image file (", bytes.size(), " bytes; PNG, JPEG and WebP are supported)");
  }
  check_size(img.width, img.height, what);
  return img;
}

std::vector<uint8_t> read_image_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path, ": cannot open the image file");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

RgbImage read_image_file(const std::string& path) { return decode_image(read_image_bytes(path), path); }

}  // namespace deepinfer::vision
