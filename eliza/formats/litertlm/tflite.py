"""A TFLite flatbuffer written with the object API of ai_edge_litert's schema: the model (its
buffers shared by every signature) and a subgraph builder whose ops track their output
shapes, so an architecture's graph reads as its forward pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from eliza.formats.gguf_models.affine import Int8Rows
from eliza.formats.litertlm.common import FORMAT, WRITER_VERSION

_ALIGN = 64  # weights are read in place: XNNPACK wants their buffers aligned


def schema() -> Any:
    from ai_edge_litert import schema_py_generated  # type: ignore[import-untyped]

    return schema_py_generated


class AlignedBuffer:
    """A TFLite Buffer whose data starts on a 64-byte boundary; flatbuffers' own
    CreateNumpyVector aligns a uint8 vector to 1 byte only."""

    def __init__(self, payload: memoryview) -> None:
        self.payload = payload

    def Pack(self, builder: Any) -> int:  # the flatbuffers object API's name
        tfl = schema()
        size = self.payload.nbytes
        builder.StartVector(1, size, _ALIGN)
        builder.head = builder.head - size
        builder.Bytes[builder.head : builder.head + size] = self.payload
        builder.vectorNumElems = size
        data = builder.EndVector()
        tfl.BufferStart(builder)
        tfl.BufferAddData(builder, data)
        end: int = tfl.BufferEnd(builder)
        return end


class Model:
    """The model under construction: buffers (shared by all signatures), operator codes,
    subgraphs and their signature definitions."""

    def __init__(self, capacity: int) -> None:
        tfl = schema()
        self.capacity = capacity
        self.buffers: list[Any] = [tfl.BufferT()]  # buffer 0: the empty sentinel
        self.buffer_index: dict[str, int] = {}
        self.opcodes: list[int] = []
        self.subgraphs: list[Any] = []
        self.signatures: list[Any] = []

    def buffer(self, key: str, array: npt.NDArray[Any]) -> int:
        if key not in self.buffer_index:
            # A view, not a copy: a model's weights are most of the memory a write takes.
            self.buffers.append(AlignedBuffer(np.ascontiguousarray(array).data.cast("B")))
            self.buffer_index[key] = len(self.buffers) - 1
        return self.buffer_index[key]

    def opcode(self, builtin: int) -> int:
        if builtin not in self.opcodes:
            self.opcodes.append(builtin)
        return self.opcodes.index(builtin)

    def to_bytes(self) -> bytes:
        import flatbuffers  # type: ignore[import-untyped]

        tfl = schema()
        model = tfl.ModelT()
        model.version = 3
        model.description = f"{FORMAT} writer {WRITER_VERSION}"
        codes = []
        for builtin in self.opcodes:
            code = tfl.OperatorCodeT()
            code.builtinCode = builtin
            code.deprecatedBuiltinCode = min(builtin, 127)  # 127: PLACEHOLDER_FOR_GREATER_OP_CODES
            code.version = 1
            codes.append(code)
        model.operatorCodes = codes
        model.subgraphs = self.subgraphs
        model.buffers = self.buffers
        model.signatureDefs = self.signatures
        # Sized for the weights up front: growing doubles and copies the whole buffer.
        builder = flatbuffers.Builder(self.capacity + (4 << 20))
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())


class Graph:
    """One subgraph; tensors are indices, their shapes tracked here so each op's output
    shape is derived from its inputs."""

    def __init__(self, model: Model, name: str) -> None:
        tfl = schema()
        self.tfl = tfl
        self.model = model
        self.subgraph = tfl.SubGraphT()
        self.subgraph.name = name
        self.subgraph.tensors, self.subgraph.operators = [], []
        self.subgraph.inputs, self.subgraph.outputs = [], []
        self.shapes: list[list[int]] = []
        self.types: list[int] = []
        self.row_scales: dict[int, tuple[str, npt.NDArray[np.float32]]] = {}
        self.count = 0

    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: type[np.generic],
        buffer: int = 0,
        quantization: Any = None,
    ) -> int:
        tensor = self.tfl.TensorT()
        tensor.name = name
        tensor.shape = [int(s) for s in shape]
        types = {np.int32: self.tfl.TensorType.INT32, np.int8: self.tfl.TensorType.INT8}
        tensor.type = types.get(dtype, self.tfl.TensorType.FLOAT32)
        tensor.buffer = buffer
        tensor.quantization = quantization
        self.subgraph.tensors.append(tensor)
        self.shapes.append(list(tensor.shape))
        self.types.append(tensor.type)
        return len(self.subgraph.tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype: type[np.generic]) -> int:
        index = self.tensor(name, shape, dtype)
        self.subgraph.inputs.append(index)
        return index

    def const(self, key: str, array: npt.NDArray[Any] | Int8Rows) -> int:
        if isinstance(array, Int8Rows):
            return self._int8_rows(key, array)
        dtype = np.int32 if array.dtype == np.int32 else np.float32
        return self.tensor(key, array.shape, dtype, self.model.buffer(key, np.asarray(array, dtype=dtype)))

    def _int8_rows(self, key: str, weight: Int8Rows) -> int:
        """An int8 tensor quantized per row (axis 0, zero point 0): FULLY_CONNECTED takes it as
        int8 weights per output channel with float activations (XNNPACK's dynamically
        quantized kernels), GATHER through `gather`. Its scales are also a float32 constant,
        `<key>.scales`, for the rows a gather takes."""
        quantization = self.tfl.QuantizationParametersT()
        quantization.scale = [float(s) for s in weight.scales]
        quantization.zeroPoint = [0] * len(weight.scales)
        quantization.quantizedDimension = 0
        index = self.tensor(key, weight.shape, np.int8, self.model.buffer(key, weight.q), quantization)
        self.row_scales[index] = key + ".scales", weight.scales
        return index

    def i32(self, values: Sequence[int]) -> int:
        ints = [int(v) for v in values]
        return self.const("const_i32_" + "_".join(map(str, ints)), np.array(ints, dtype=np.int32))

    def op(
        self,
        builtin: int,
        inputs: Sequence[int],
        shape: Sequence[int],
        options: tuple[int, Any] = (0, None),
        dtype: type[np.generic] = np.float32,
        name: str | None = None,
    ) -> int:
        self.count += 1
        output = self.tensor(name or f"t{self.count}", shape, dtype)
        operator = self.tfl.OperatorT()
        operator.opcodeIndex = self.model.opcode(builtin)
        operator.inputs = list(inputs)
        operator.outputs = [output]
        operator.builtinOptionsType, operator.builtinOptions = options
        self.subgraph.operators.append(operator)
        return output

    def _options(self, kind: str, **values: Any) -> tuple[int, Any]:
        options = getattr(self.tfl, f"{kind}OptionsT")()
        for key, value in values.items():
            setattr(options, key, value)
        return getattr(self.tfl.BuiltinOptions, f"{kind}Options"), options

    def fc(self, x: int, w: int) -> int:
        # keepNumDims: [1, n, in] stays [1, n, out]; no bias (-1).
        shape = [*self.shapes[x][:-1], self.shapes[w][0]]
        options = self._options("FullyConnected", keepNumDims=True)
        return self.op(self.tfl.BuiltinOperator.FULLY_CONNECTED, [x, w, -1], shape, options)

    def _broadcast(self, builtin: int, kind: str, a: int, b: int) -> int:
        sa, sb = self.shapes[a], self.shapes[b]
        rank = max(len(sa), len(sb))
        sa, sb = [1] * (rank - len(sa)) + sa, [1] * (rank - len(sb)) + sb
        return self.op(builtin, [a, b], [max(x, y) for x, y in zip(sa, sb, strict=True)], self._options(kind))

    def add(self, a: int, b: int) -> int:
        return self._broadcast(self.tfl.BuiltinOperator.ADD, "Add", a, b)

    def mul(self, a: int, b: int) -> int:
        return self._broadcast(self.tfl.BuiltinOperator.MUL, "Mul", a, b)

    def sub(self, a: int, b: int) -> int:
        return self._broadcast(self.tfl.BuiltinOperator.SUB, "Sub", a, b)

    def minimum(self, a: int, b: int) -> int:
        return self._broadcast(self.tfl.BuiltinOperator.MINIMUM, "MaximumMinimum", a, b)

    def floor_mod(self, a: int, b: int) -> int:
        return self._broadcast(self.tfl.BuiltinOperator.FLOOR_MOD, "FloorMod", a, b)

    def cast_float(self, x: int) -> int:
        options = self._options("Cast", inDataType=self.types[x], outDataType=self.tfl.TensorType.FLOAT32)
        return self.op(self.tfl.BuiltinOperator.CAST, [x], self.shapes[x], options)

    def cast_int(self, x: int) -> int:
        """float32 -> int32 (truncating: the graph casts only integer-valued floats)."""
        options = self._options("Cast", inDataType=self.types[x], outDataType=self.tfl.TensorType.INT32)
        return self.op(self.tfl.BuiltinOperator.CAST, [x], self.shapes[x], options, np.int32)

    def gelu_tanh(self, x: int) -> int:
        options = self._options("Gelu", approximate=True)
        return self.op(self.tfl.BuiltinOperator.GELU, [x], self.shapes[x], options)

    def unary(self, builtin: int, x: int) -> int:
        return self.op(builtin, [x], self.shapes[x])

    def reshape(self, x: int, shape: Sequence[int]) -> int:
        options = self._options("Reshape", newShape=list(shape))
        return self.op(self.tfl.BuiltinOperator.RESHAPE, [x, self.i32(shape)], shape, options)

    def transpose(self, x: int, perm: Sequence[int]) -> int:
        shape = [self.shapes[x][p] for p in perm]
        return self.op(
            self.tfl.BuiltinOperator.TRANSPOSE, [x, self.i32(perm)], shape, self._options("Transpose")
        )

    def mean_last(self, x: int) -> int:
        shape = [*self.shapes[x][:-1], 1]
        axis = self.i32([len(self.shapes[x]) - 1])
        return self.op(
            self.tfl.BuiltinOperator.MEAN, [x, axis], shape, self._options("Reducer", keepDims=True)
        )

    def gather(self, params: int, indices: int, axis: int = 0) -> int:
        """Rows (along `axis`) of `params` as float32; an int8 table's rows times their own
        scales (axis 0 only)."""
        shape = self.shapes[params][:axis] + self.shapes[indices] + self.shapes[params][axis + 1 :]
        options = self._options("Gather", axis=axis)
        if params not in self.row_scales:
            return self.op(self.tfl.BuiltinOperator.GATHER, [params, indices], shape, options)
        rows = self.op(self.tfl.BuiltinOperator.GATHER, [params, indices], shape, options, np.int8)
        key, scales = self.row_scales[params]
        scale = self.gather(self.const(key, scales), indices)
        return self.mul(self.cast_float(rows), self.reshape(scale, [*self.shapes[indices], 1]))

    def bmm(self, a: int, b: int, adj_y: bool = False) -> int:
        sa, sb = self.shapes[a], self.shapes[b]
        shape = [*sa[:-1], sb[-2] if adj_y else sb[-1]]
        options = self._options("BatchMatMul", adjX=False, adjY=adj_y)
        return self.op(self.tfl.BuiltinOperator.BATCH_MATMUL, [a, b], shape, options)

    def softmax(self, x: int) -> int:
        return self.op(
            self.tfl.BuiltinOperator.SOFTMAX, [x], self.shapes[x], self._options("Softmax", beta=1.0)
        )

    def slice(self, x: int, begin: Sequence[int], size: Sequence[int]) -> int:
        dtype = np.int32 if self.types[x] == self.tfl.TensorType.INT32 else np.float32
        inputs = [x, self.i32(begin), self.i32(size)]
        return self.op(self.tfl.BuiltinOperator.SLICE, inputs, size, self._options("Slice"), dtype)

    def concat(self, xs: Sequence[int], axis: int, dtype: type[np.generic]) -> int:
        shape = list(self.shapes[xs[0]])
        shape[axis] = sum(self.shapes[x][axis] for x in xs)
        options = self._options("Concatenation", axis=axis)
        return self.op(self.tfl.BuiltinOperator.CONCATENATION, xs, shape, options, dtype)

    def update_slice(self, operand: int, update: int, start: int, name: str) -> int:
        builtin = self.tfl.BuiltinOperator.DYNAMIC_UPDATE_SLICE
        options = self._options("DynamicUpdateSlice")
        return self.op(builtin, [operand, update, start], self.shapes[operand], options, name=name)

    def rms_norm(self, x: int, w: int, eps: float) -> int:
        mean_square = self.mean_last(self.mul(x, x))
        epsilon = self.const(f"const_eps_{eps!r}", np.array([eps], dtype=np.float32))
        inverse = self.unary(self.tfl.BuiltinOperator.RSQRT, self.add(mean_square, epsilon))
        return self.mul(self.mul(x, inverse), w)
