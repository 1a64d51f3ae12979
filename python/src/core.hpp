// Shared by the two units of hla_oracle._core (core.cpp: reference, check,
// fixtures; python_adapter.cpp: the in-process fuzz adapter).
#pragma once

#include "hla/batch.hpp"
#include "hla/fuzz/adapter.hpp"
#include "hla/fuzz/features.hpp"
#include "hla/io/safetensors.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace nb = nanobind;

namespace hla::python {

// A tensor as the Python side hands it over: safetensors dtype name ("F32",
// "BF16", "I64", …), shape, little-endian bytes.
using TensorArg = std::tuple<std::string, std::vector<int64_t>, nb::bytes>;
io::Tensor tensor_of(const TensorArg& t, const std::string& name);

// Options from their text, by the names of kOptions (hla/options.hpp).
Options options_of(const std::map<std::string, std::string>& text);

// numpy arrays owning a copy of the values.
nb::object numpy_f64(std::vector<double>&& v, std::vector<size_t> shape);
nb::object numpy_u8(std::vector<uint8_t>&& v, std::vector<size_t> shape);
nb::object numpy_i64(std::vector<int64_t>&& v);
std::vector<size_t> out_dims(const BatchProblem& p);  // [B,H,n,dv]
std::vector<size_t> den_dims(const BatchProblem& p);  // [B,H,n]

fuzz::Supports supports_of(const nb::dict& d);
void add_fuzz(nb::module_& m);

}  // namespace hla::python
