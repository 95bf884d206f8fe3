#include "core/device.h"

#include "core/error.h"

namespace deepinfer {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return {};
  if (s == "cuda") return {DeviceKind::kCuda, 0};
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() < 9 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos)
    return {DeviceKind::kCuda, std::stoi(s.substr(5))};
  throw Error("unknown device '" + s + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace deepinfer
