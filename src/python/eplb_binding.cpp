// deepinfer._core.eplb_rebalance: the C++ EPLB (src/parallel/eplb.h) for deepinfer.eplb, on nested
// lists (the Python side converts numpy arrays and torch tensors to and from them).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "parallel/eplb.h"

namespace py = pybind11;

namespace {

int64_t int_arg(const py::handle& v, const char* name) {
  if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr()))
    throw py::type_error(std::string(name) + " must be an int, got " + std::string(py::str(py::type::of(v).attr("__name__"))));
  return v.cast<int64_t>();
}

// weight: a sequence of equally long sequences of real numbers -> row-major fp32.
std::vector<float> weight_rows(const py::handle& weight, int64_t& layers, int64_t& experts) {
  if (!PySequence_Check(weight.ptr()) || py::isinstance<py::str>(weight))
    throw py::type_error("weight must be a 2-D [layers][experts] sequence of loads");
  const py::sequence rows = py::reinterpret_borrow<py::sequence>(weight);
  layers = static_cast<int64_t>(rows.size());
  experts = -1;
  std::vector<float> out;
  for (int64_t l = 0; l < layers; ++l) {
    const py::object row = rows[l];
    if (!PySequence_Check(row.ptr()) || py::isinstance<py::str>(row))
      throw py::type_error("weight must be 2-D: row " + std::to_string(l) + " is not a sequence");
    const py::sequence r = py::reinterpret_borrow<py::sequence>(row);
    if (experts < 0) experts = static_cast<int64_t>(r.size());
    if (static_cast<int64_t>(r.size()) != experts)
      throw py::value_error("weight rows must all have " + std::to_string(experts) + " experts; row " +
                            std::to_string(l) + " has " + std::to_string(r.size()));
    for (const py::handle x : r) {
      if (PyBool_Check(x.ptr()) || !(PyFloat_Check(x.ptr()) || PyLong_Check(x.ptr()) || PyNumber_Check(x.ptr())))
        throw py::type_error("weight holds a " + std::string(py::str(py::type::of(x).attr("__name__"))) +
                             " in row " + std::to_string(l) + "; loads must be numbers");
      out.push_back(static_cast<float>(py::float_(py::reinterpret_borrow<py::object>(x)).cast<double>()));
    }
  }
  if (layers == 0) throw py::value_error("weight must have at least one layer");
  return out;
}

py::list nested(const std::vector<int64_t>& v, const std::vector<int64_t>& shape, size_t dim = 0, size_t at = 0) {
  py::list out;
  size_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (dim + 1 == shape.size()) out.append(v[at + i]);
    else out.append(nested(v, shape, dim + 1, at + i * stride));
  }
  return out;
}

}  // namespace

void bind_eplb(py::module_& m) {
  m.def(
      "eplb_rebalance",
      [](const py::object& weight, const py::object& num_replicas, const py::object& num_groups,
         const py::object& num_nodes, const py::object& num_gpus) {
        int64_t layers = 0, experts = 0;
        const std::vector<float> w = weight_rows(weight, layers, experts);
        const deepinfer::parallel::EplbPlacement p = deepinfer::parallel::rebalance_experts(
            w.data(), layers, experts, int_arg(num_replicas, "num_replicas"), int_arg(num_groups, "num_groups"),
            int_arg(num_nodes, "num_nodes"), int_arg(num_gpus, "num_gpus"));
        return py::make_tuple(nested(p.phy2log, {layers, p.num_replicas}),
                              nested(p.log2phy, {layers, experts, p.max_replicas}), nested(p.logcnt, {layers, experts}));
      },
      py::arg("weight"), py::arg("num_replicas"), py::arg("num_groups"), py::arg("num_nodes"), py::arg("num_gpus"));
}
