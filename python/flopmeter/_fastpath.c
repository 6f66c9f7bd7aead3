/* flopmeter._fastpath: Meter.on_microbatch's hot path for plain CPU tensors, in C.
 *
 * What it is for. A trainer calls on_microbatch once per micro-batch with the batch as CPU tensors. Through
 * ctypes, a call spends most of its time in the interpreter (a struct's fields stored one by one, ctypes'
 * call machinery, the GIL released and taken back) rather than in flopmeter. This module does the same work
 * in one C function: it checks that each argument is exactly what the fast path takes, reads the tensors'
 * addresses, fills a flopmeter_microbatch on its own stack and calls flopmeter_on_microbatch_ex, which writes
 * the reason of a refusal into a buffer on the same stack (nothing is written for a counted batch).
 *
 * What it takes, exactly as the Python fast path in meter.py does (anything else returns None, and the caller
 * takes the general path, which converts every form and raises TypeError/ValueError naming the argument):
 *   - cu_seqlens: a torch.Tensor (the exact type), on the CPU, strided, int64, stride() == (1,);
 *   - or position_ids: the same, int64 or int32;
 *   - grid_thw: None, or a torch.Tensor on the CPU, strided, int64, stride() == (3, 1), shape [n, 3];
 *   - padding_tokens, samples: exact ints in [0, 2^63);
 *   - loss_sum and label_tokens: both None, or a finite exact float and an exact int in [0, 2^63).
 * Any exception raised while reading an attribute (a tensor subclass that overrides one, say) is cleared and
 * the call returns None: the general path then reports it.
 *
 * Ownership and threads. A Binding holds the address of flopmeter_on_microbatch_ex (taken from the library
 * ctypes loaded, so both use one copy of libflopmeter), the plugin handle, and references to torch's Tensor
 * type and dtype objects. The call does not release the GIL; the library serializes calls on one plugin and
 * answers a handle destroyed by another thread with FLOPMETER_E_INVALID_HANDLE (c_api.h), so a stale handle is
 * safe. `disable()` makes every later call return FLOPMETER_E_INVALID_HANDLE without calling the library.
 *
 * The module needs no torch headers and links nothing: it reads tensors through their Python attributes, so
 * one build works with every torch version. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "flopmeter/c_api.h"

#if PY_VERSION_HEX < 0x03090000
#define PyObject_CallMethodNoArgs(object, name) PyObject_CallMethodObjArgs((object), (name), NULL)
#endif

typedef int (*on_microbatch_fn)(flopmeter_plugin*, const flopmeter_microbatch*, char*, size_t);

typedef struct {
  PyObject ob_base; /* what PyObject_HEAD declares */
  on_microbatch_fn call;
  flopmeter_plugin* handle;
  PyObject* tensor_type; /* torch.Tensor */
  PyObject* int64;       /* torch.int64 */
  PyObject* int32;       /* torch.int32 */
  PyObject* strided;     /* torch.strided */
} binding;

/* Interned attribute names, made once at import. */
static PyObject *name_is_cpu, *name_layout, *name_dtype, *name_stride, *name_data_ptr, *name_numel, *name_shape;

static void binding_dealloc(binding* self) {
  Py_XDECREF(self->tensor_type);
  Py_XDECREF(self->int64);
  Py_XDECREF(self->int32);
  Py_XDECREF(self->strided);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static int binding_init(binding* self, PyObject* args, PyObject* kwargs) {
  unsigned long long call = 0, handle = 0;
  PyObject *tensor_type, *int64, *int32, *strided;
  static char* keywords[] = {"call", "handle", "tensor_type", "int64", "int32", "strided", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KKOOOO", keywords, &call, &handle, &tensor_type, &int64, &int32,
                                   &strided)) {
    return -1;
  }
  if (call == 0 || handle == 0 || !PyType_Check(tensor_type)) {
    PyErr_SetString(PyExc_ValueError, "Binding: call and handle must be non-zero and tensor_type a type");
    return -1;
  }
  self->call = (on_microbatch_fn)(uintptr_t)call;
  self->handle = (flopmeter_plugin*)(uintptr_t)handle;
  Py_INCREF(tensor_type);
  Py_INCREF(int64);
  Py_INCREF(int32);
  Py_INCREF(strided);
  Py_XSETREF(self->tensor_type, tensor_type);
  Py_XSETREF(self->int64, int64);
  Py_XSETREF(self->int32, int32);
  Py_XSETREF(self->strided, strided);
  return 0;
}

static PyTypeObject binding_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "flopmeter._fastpath.Binding",
    .tp_basicsize = sizeof(binding),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Binding(call, handle, tensor_type, int64, int32, strided): one Meter's plugin, for on_microbatch()",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)binding_init,
    .tp_dealloc = (destructor)binding_dealloc,
};

/* 1 when `object.name` is exactly `expected` (an identity test: dtypes, layouts and True are singletons), 0
 * when it is something else, -1 with an exception set when reading it raised. */
static int attribute_is(PyObject* object, PyObject* name, PyObject* expected) {
  PyObject* value = PyObject_GetAttr(object, name);
  if (value == NULL) return -1;
  const int same = value == expected;
  Py_DECREF(value);
  return same;
}

/* 1 when `sequence` is a tuple (torch.Size is one) of exactly the given ints; 0 otherwise. */
static int tuple_is(PyObject* sequence, Py_ssize_t length, const long* values) {
  if (!PyTuple_Check(sequence) || PyTuple_GET_SIZE(sequence) != length) return 0;
  for (Py_ssize_t i = 0; i < length; ++i) {
    PyObject* item = PyTuple_GET_ITEM(sequence, i);
    if (!PyLong_CheckExact(item)) return 0;
    int overflow = 0;
    const long value = PyLong_AsLongAndOverflow(item, &overflow);
    if (overflow != 0 || value != values[i]) return 0;
  }
  return 1;
}

/* The tensor's data address and its number of entries: 1 on success, 0 not a fast-path tensor, -1 an
 * exception. */
static int tensor_address(PyObject* tensor, void** address, size_t* count) {
  PyObject* pointer = PyObject_CallMethodNoArgs(tensor, name_data_ptr);
  if (pointer == NULL) return -1;
  *address = PyLong_AsVoidPtr(pointer);
  Py_DECREF(pointer);
  if (*address == NULL && PyErr_Occurred()) return -1;
  PyObject* numel = PyObject_CallMethodNoArgs(tensor, name_numel);
  if (numel == NULL) return -1;
  const long long n = PyLong_AsLongLong(numel);
  Py_DECREF(numel);
  if (n < 0) return PyErr_Occurred() ? -1 : 0;
  *count = (size_t)n;
  return 1;
}

/* A CPU, strided tensor of the exact type whose dtype is one of the two given (int32 may be NULL) and whose
 * stride() is exactly `strides` (`dims` entries: its dimensions and their contiguity); sets *is_int32. 1 yes,
 * 0 no, -1 an exception. */
static int plain_cpu_tensor(const binding* b, PyObject* tensor, PyObject* int32, Py_ssize_t dims, const long* strides,
                            int* is_int32) {
  if (Py_TYPE(tensor) != (PyTypeObject*)b->tensor_type) return 0;
  int yes = attribute_is(tensor, name_is_cpu, Py_True);
  if (yes != 1) return yes;
  yes = attribute_is(tensor, name_layout, b->strided);
  if (yes != 1) return yes;
  PyObject* dtype = PyObject_GetAttr(tensor, name_dtype);
  if (dtype == NULL) return -1;
  const int int64 = dtype == b->int64, narrow = int32 != NULL && dtype == int32;
  Py_DECREF(dtype);
  *is_int32 = narrow;
  if (!int64 && !narrow) return 0;
  PyObject* stride = PyObject_CallMethodNoArgs(tensor, name_stride);
  if (stride == NULL) return -1;
  yes = tuple_is(stride, dims, strides);
  Py_DECREF(stride);
  return yes;
}

/* An exact int in [0, 2^63): 1 and *out set, 0 otherwise (never an exception). */
static int count_value(PyObject* object, int64_t* out) {
  if (!PyLong_CheckExact(object)) return 0;
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(object, &overflow);
  if (overflow != 0 || value < 0) return 0;
  *out = (int64_t)value;
  return 1;
}

/* The batch argument: fills the micro-batch's cu_seqlens or positions fields. 1, 0 or -1 as above. */
static int take_batch(const binding* b, PyObject* cu_seqlens, PyObject* position_ids, flopmeter_microbatch* mb) {
  static const long contiguous_1d[1] = {1};
  const int is_positions = cu_seqlens == Py_None;
  if (is_positions == (position_ids == Py_None)) return 0; /* neither, or both: the general path says which */
  PyObject* tensor = is_positions ? position_ids : cu_seqlens;
  int is_int32 = 0;
  int yes = plain_cpu_tensor(b, tensor, is_positions ? b->int32 : NULL, 1, contiguous_1d, &is_int32);
  if (yes != 1) return yes;
  void* address = NULL;
  size_t count = 0;
  yes = tensor_address(tensor, &address, &count);
  if (yes != 1) return yes;
  if (!is_positions) {
    mb->cu_seqlens = (const int64_t*)address;
    mb->num_cu_seqlens = count;
  } else if (is_int32) {
    mb->positions_int32 = (const int32_t*)address;
    mb->num_positions_int32 = count;
  } else {
    mb->positions = (const int64_t*)address;
    mb->num_positions = count;
  }
  return 1;
}

/* grid_thw: None, or an [n, 3] contiguous int64 CPU tensor. 1, 0 or -1 as above. */
static int take_grids(const binding* b, PyObject* grids, flopmeter_microbatch* mb) {
  static const long row_major[2] = {3, 1};
  if (grids == Py_None) return 1;
  int is_int32 = 0;
  const int yes = plain_cpu_tensor(b, grids, NULL, 2, row_major, &is_int32);
  if (yes != 1) return yes;
  PyObject* shape = PyObject_GetAttr(grids, name_shape);
  if (shape == NULL) return -1;
  int64_t rows = -1;
  const int three_columns =
      PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) == 2 && count_value(PyTuple_GET_ITEM(shape, 0), &rows) &&
      PyLong_CheckExact(PyTuple_GET_ITEM(shape, 1)) && PyLong_AsLong(PyTuple_GET_ITEM(shape, 1)) == 3;
  Py_DECREF(shape);
  if (!three_columns) return 0;
  PyObject* pointer = PyObject_CallMethodNoArgs(grids, name_data_ptr);
  if (pointer == NULL) return -1;
  mb->grids = (const flopmeter_grid*)PyLong_AsVoidPtr(pointer);
  Py_DECREF(pointer);
  if (mb->grids == NULL && PyErr_Occurred()) return -1;
  mb->num_grids = (size_t)rows;
  return 1;
}

/* on_microbatch(binding, cu_seqlens, position_ids, grid_thw, padding_tokens, samples, loss_sum,
 *               label_tokens) -> int | str | None
 * The library's return code (FLOPMETER_OK, FLOPMETER_E_AFTER_FLUSH, ...); for FLOPMETER_E_REJECTED the library's
 * reason instead (a str: the micro-batch was refused and counted so once); or None when an argument is not one
 * the fast path takes (nothing was counted; take the general path). */
static PyObject* on_microbatch(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 8 || Py_TYPE(args[0]) != &binding_type) {
    PyErr_SetString(PyExc_TypeError,
                    "on_microbatch(binding, cu_seqlens, position_ids, grid_thw, padding_tokens, samples, "
                    "loss_sum, label_tokens)");
    return NULL;
  }
  const binding* b = (const binding*)args[0];
  flopmeter_microbatch mb;
  memset(&mb, 0, sizeof mb);
  mb.struct_size = sizeof mb;
  if (!count_value(args[4], &mb.padding_tokens) || !count_value(args[5], &mb.samples)) Py_RETURN_NONE;
  PyObject *loss_sum = args[6], *label_tokens = args[7];
  if (loss_sum != Py_None || label_tokens != Py_None) {
    if (!PyFloat_CheckExact(loss_sum) || !count_value(label_tokens, &mb.label_tokens)) Py_RETURN_NONE;
    mb.loss_sum = PyFloat_AS_DOUBLE(loss_sum);
    if (!isfinite(mb.loss_sum)) Py_RETURN_NONE;
    mb.has_loss = 1;
  }
  int taken = take_batch(b, args[1], args[2], &mb);
  if (taken == 1) taken = take_grids(b, args[3], &mb);
  if (taken != 1) {
    if (taken < 0) PyErr_Clear(); /* the general path reads the same attributes and reports what raised */
    Py_RETURN_NONE;
  }
  if (b->handle == NULL) return PyLong_FromLong(FLOPMETER_E_INVALID_HANDLE);
  char why[512]; /* written by the library only when it refuses the micro-batch */
  const int code = b->call(b->handle, &mb, why, sizeof why);
  if (code == FLOPMETER_E_REJECTED) return PyUnicode_DecodeUTF8(why, (Py_ssize_t)strlen(why), "replace");
  return PyLong_FromLong(code);
}

static PyObject* disable(PyObject* module, PyObject* argument) {
  (void)module;
  if (Py_TYPE(argument) != &binding_type) {
    PyErr_SetString(PyExc_TypeError, "disable(binding)");
    return NULL;
  }
  ((binding*)argument)->handle = NULL;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"on_microbatch", (PyCFunction)(void (*)(void))on_microbatch, METH_FASTCALL,
     "on_microbatch(binding, cu_seqlens, position_ids, grid_thw, padding_tokens, samples, loss_sum, "
     "label_tokens): the library's return code, its reason (a str) for a refused micro-batch, or None for an "
     "argument the fast path does not take"},
    {"disable", disable, METH_O, "disable(binding): later calls return FLOPMETER_E_INVALID_HANDLE"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    "flopmeter._fastpath",
    "Meter.on_microbatch's hot path for plain CPU tensors",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
  if (PyType_Ready(&binding_type) < 0) return NULL;
  name_is_cpu = PyUnicode_InternFromString("is_cpu");
  name_layout = PyUnicode_InternFromString("layout");
  name_dtype = PyUnicode_InternFromString("dtype");
  name_stride = PyUnicode_InternFromString("stride");
  name_data_ptr = PyUnicode_InternFromString("data_ptr");
  name_numel = PyUnicode_InternFromString("numel");
  name_shape = PyUnicode_InternFromString("shape");
  if (!name_is_cpu || !name_layout || !name_dtype || !name_stride || !name_data_ptr || !name_numel || !name_shape) {
    return NULL;
  }
  PyObject* module = PyModule_Create(&module_definition);
  if (module == NULL) return NULL;
  Py_INCREF(&binding_type);
  if (PyModule_AddObject(module, "Binding", (PyObject*)&binding_type) < 0) {
    Py_DECREF(&binding_type);
    Py_DECREF(module);
    return NULL;
  }
  if (PyModule_AddIntConstant(module, "OK", FLOPMETER_OK) < 0 ||
      PyModule_AddIntConstant(module, "E_REJECTED", FLOPMETER_E_REJECTED) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
