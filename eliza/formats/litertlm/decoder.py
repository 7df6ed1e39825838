"""One signature of a decoder-only transformer in the layout LiteRT-LM's CPU executor looks
up by name (the package docstring), with the pieces every architecture's graph is made of:
the caches in and out, rope of halves, the cache write at input_pos[0], grouped-query
attention under the executor's mask, optionally narrowed to a sliding window."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from eliza.formats.litertlm.common import CacheLayout, Weight
from eliza.formats.litertlm.tflite import Graph, Model


def rope_tables(base: float, head_dim: int, context: int) -> tuple[npt.NDArray[np.float32], ...]:
    """cos and sin [context, head_dim] of the halves rope: dimension i rotates with i + head_dim/2."""
    inverse = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.arange(context, dtype=np.float64)[:, None] * inverse[None, :]
    cos, sin = np.tile(np.cos(angles), 2), np.tile(np.sin(angles), 2)
    return cos.astype(np.float32), sin.astype(np.float32)


def rotate_half_matrix(head_dim: int) -> npt.NDArray[np.float32]:
    """W with FULLY_CONNECTED(x, W) = cat(-x2, x1): exact (entries 0 and ±1), and a kernel
    XNNPACK runs, where a slice-negate-concat would not be delegated whole."""
    half = head_dim // 2
    w = np.zeros((head_dim, head_dim), dtype=np.float32)
    for j in range(half):
        w[j, j + half] = -1.0
        w[j + half, j] = 1.0
    return w


# The executor's masked-out value; the window's mask uses the same, so MINIMUM of the two
# is a mask the softmax sees as the executor's own.
MASKED = np.float32(-0.7 * float(np.finfo(np.float32).max))


class Signature:
    """`prefill_<n>` or `decode`: its inputs made on construction, its outputs in `finish`.
    Constants are made when first asked for, so each graph holds only what it uses."""

    def __init__(
        self,
        model: Model,
        *,
        weights: Mapping[str, Weight],
        n: int,
        decode: bool,
        context: int,
        layout: CacheLayout,
        heads: int,
        kv_heads: int,
        head_dim: int,
    ) -> None:
        self.model = model
        self.weights = weights
        self.key = "decode" if decode else f"prefill_{n}"
        self.decode = decode
        self.n, self.context, self.n_layer = n, context, len(layout.rows)
        self.layout = layout
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.g = g = Graph(model, self.key)
        self.tokens = g.input("tokens", [1, n], np.int32)
        self.input_pos = g.input("input_pos", [n], np.int32)
        self.mask = g.input("mask", [1, 1, n, context], np.float32)
        self.caches_in = [
            (
                g.input(f"kv_cache_k_{i}", [1, rows, kv_heads, head_dim], np.float32),
                g.input(f"kv_cache_v_{i}", [1, rows, kv_heads, head_dim], np.float32),
            )
            for i, rows in enumerate(layout.rows)
        ]
        self.caches_out: list[tuple[int, int]] = []
        self._start: int | None = None
        self._windows: dict[int, int] = {}
        self._first: int | None = None
        self._ring_starts: dict[int, int] = {}
        self._ring_rows: dict[int, int] = {}
        self._ring_masks: dict[int, int] = {}

    def rope(self, base: float, key: str = "") -> Callable[[int], int]:
        """x [1, n, heads, head_dim] -> x rotated by its positions at `base`; `key` tells the
        tables of two bases apart."""
        g, n, head_dim = self.g, self.n, self.head_dim
        cos_table, sin_table = rope_tables(base, head_dim, self.context)
        cos = g.reshape(g.gather(g.const(f"rope_cos{key}", cos_table), self.input_pos), [1, n, 1, head_dim])
        sin = g.reshape(g.gather(g.const(f"rope_sin{key}", sin_table), self.input_pos), [1, n, 1, head_dim])
        rotate = g.const("rope_rotate_half", rotate_half_matrix(head_dim))

        def apply(x: int) -> int:
            return g.add(g.mul(x, cos), g.mul(g.fc(x, rotate), sin))

        return apply

    def weight(self, name: str) -> int:
        """The GGUF tensor `name` as this graph's constant (its buffer shared by every signature)."""
        return self.g.const(name, self.weights[name])

    def scalar(self, key: str, value: float) -> int:
        return self.g.const(key, np.array([value], dtype=np.float32))

    def cache_start(self) -> int:
        """[0, input_pos[0], 0, 0]: where a signature's rows go in every cache."""
        if self._start is None:
            g = self.g
            zero = g.i32([0])
            self._start = g.concat([zero, g.slice(self.input_pos, [0], [1]), zero, zero], 0, np.int32)
        return self._start

    def write_cache(self, layer: int, k: int, v: int) -> tuple[int, int]:
        """The layer's caches with k and v [1, n, kv_heads, head_dim] written: a cache of the
        context's rows at input_pos[0] (padded rows, input_pos 0, land past the visible ones
        and are overwritten later, where a scatter by position would overwrite BOS); a ring
        at input_pos[0] modulo its rows (ring_write)."""
        rows = self.layout.rows[layer]
        k_in, v_in = self.caches_in[layer]
        k_name, v_name = f"kv_cache_k_{layer}_out", f"kv_cache_v_{layer}_out"
        if rows == self.context:
            start = self.cache_start()
            k_cache = self.g.update_slice(k_in, k, start, k_name)
            v_cache = self.g.update_slice(v_in, v, start, v_name)
        else:
            k_cache = self.ring_write(k_in, k, rows, k_name)
            v_cache = self.ring_write(v_in, v, rows, v_name)
        self.caches_out.append((k_cache, v_cache))
        return k_cache, v_cache

    def first_position(self) -> int:
        """input_pos[0] as a float32 [1]: integers, exact in float32 for any context a
        flatbuffer holds."""
        if self._first is None:
            self._first = self.g.cast_float(self.g.slice(self.input_pos, [0], [1]))
        return self._first

    def ring_write(self, cache: int, x: int, rows: int, name: str) -> int:
        """A ring of `rows` rows with x's n rows written at input_pos[0] + j modulo `rows`,
        padded ones too (they hold later positions, which the ring mask hides until they are
        written for real). A decode's one row never wraps: one DYNAMIC_UPDATE_SLICE, in place
        where the engine binds one buffer as the cache's input and output (its CPU path). A
        prefill's rows may wrap: every ring row is gathered from the old cache or x."""
        g, n = self.g, self.n
        if n == 1:
            if rows not in self._ring_starts:
                zero = g.i32([0])
                row = g.cast_int(
                    g.floor_mod(self.first_position(), self.scalar(f"ring_{rows}_rows", float(rows)))
                )
                self._ring_starts[rows] = g.concat([zero, row, zero, zero], 0, np.int32)
            return g.update_slice(cache, x, self._ring_starts[rows], name)
        if rows not in self._ring_rows:
            # row r takes x's row (r - input_pos[0]) mod rows when that is < n, else stays
            ring = g.const(f"ring_{rows}_row_index", np.arange(rows, dtype=np.float32))
            offset = g.floor_mod(
                g.sub(ring, self.first_position()), self.scalar(f"ring_{rows}_rows", float(rows))
            )
            taken = g.minimum(
                g.unary(g.tfl.BuiltinOperator.RELU, g.sub(self.scalar(f"const_{n}", float(n)), offset)),
                self.scalar("const_one", 1.0),
            )  # 1 where row r is written now, else 0
            source = g.add(
                ring, g.mul(taken, g.sub(g.add(offset, self.scalar(f"ring_{rows}_rows", float(rows))), ring))
            )
            self._ring_rows[rows] = g.cast_int(source)
        both = g.concat([cache, x], 1, np.float32)
        updated = g.gather(both, self._ring_rows[rows], axis=1)
        g.subgraph.tensors[updated].name = name
        return updated

    def ring_mask(self, window: int, rows: int) -> int:
        """[1, 1, n, rows]: 0 where ring row r holds a key in a query's window, else masked.
        After this signature's write, the last position written is t = input_pos[0] + n - 1,
        and row r holds position P = t - ((t - r) mod rows) (never written when P < 0). Query
        q sees P when q - window < P <= q and P >= 0. A ring of at least window + n - 1 rows
        still holds the whole window of every query of the signature."""
        if rows not in self._ring_masks:
            g, n = self.g, self.n
            relu = g.tfl.BuiltinOperator.RELU
            ring = g.const(f"ring_{rows}_row_index", np.arange(rows, dtype=np.float32))
            last = g.add(self.first_position(), self.scalar(f"const_{n - 1}", float(n - 1)))
            held = g.sub(last, g.floor_mod(g.sub(last, ring), self.scalar(f"ring_{rows}_rows", float(rows))))
            queries = g.reshape(g.cast_float(self.input_pos), [n, 1])
            behind = g.sub(queries, held)  # [n, rows]: q - P
            outside = g.add(
                g.add(
                    g.unary(relu, g.sub(behind, self.scalar(f"const_{window - 1}", float(window - 1)))),
                    g.unary(relu, g.mul(behind, self.scalar("const_minus_one", -1.0))),
                ),
                g.unary(relu, g.mul(held, self.scalar("const_minus_one", -1.0))),
            )
            outside = g.minimum(outside, self.scalar("const_one", 1.0))  # 0 or 1
            masked = g.mul(outside, self.scalar("const_masked", float(MASKED)))
            self._ring_masks[rows] = g.reshape(masked, [1, 1, n, rows])
        return self._ring_masks[rows]

    def window_mask(self, window: int) -> int:
        """The executor's mask with every key at or before q_pos - window masked too (a
        sliding-window layer's view: q_pos - window < k_pos <= q_pos), computed from
        input_pos once per signature."""
        if window not in self._windows:
            g, n, context = self.g, self.n, self.context
            positions = g.reshape(g.cast_float(self.input_pos), [n, 1])
            # q_pos - (k_pos + window - 1) is >= 1 exactly where the key is out of the window;
            # the values are integers, exact in float32 for any context a flatbuffer holds.
            shifted = np.arange(context, dtype=np.float32)[None, :] + np.float32(window - 1)
            beyond = g.sub(positions, g.const(f"window_{window}_columns", shifted))
            one = self.scalar("const_one", 1.0)
            outside = g.minimum(g.unary(g.tfl.BuiltinOperator.RELU, beyond), one)  # 0 or 1
            masked = g.reshape(g.mul(outside, self.scalar("const_masked", float(MASKED))), [1, 1, n, context])
            self._windows[window] = g.minimum(self.mask, masked)
        return self._windows[window]

    def attend(self, q: int, k_cache: int, v_cache: int, scale: int, mask: int) -> int:
        """Attention of q [1, n, heads, head_dim] (roped) over the whole caches under `mask`:
        [1, n, heads * head_dim]. Each key/value head serves its group of query heads as one
        batched product, without repeating the cache; with one key/value head the cache is
        already in the product's layout, and is not transposed (a copy of every row)."""
        g, n = self.g, self.n
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        rows = g.shapes[k_cache][1]
        group = heads // kv_heads
        q = g.reshape(g.transpose(q, [0, 2, 1, 3]), [1, kv_heads, group * n, head_dim])
        if kv_heads == 1:
            keys = g.reshape(k_cache, [1, 1, rows, head_dim])
            values = g.reshape(v_cache, [1, 1, rows, head_dim])
        else:
            keys = g.transpose(k_cache, [0, 2, 1, 3])  # [1, kv_heads, rows, head_dim]
            values = g.transpose(v_cache, [0, 2, 1, 3])
        scores = g.reshape(g.bmm(q, keys, adj_y=True), [1, heads, n, rows])
        scores = g.add(g.mul(scores, scale), mask)
        probs = g.reshape(g.softmax(scores), [1, kv_heads, group * n, rows])
        attended = g.reshape(g.bmm(probs, values), [1, heads, n, head_dim])
        return g.reshape(g.transpose(attended, [0, 2, 1, 3]), [1, n, heads * head_dim])

    def finish(self, logits: int | None) -> None:
        """Names the outputs (decode's `logits`, then every layer's caches) and adds the
        subgraph and its signature definition to the model."""
        g, tfl = self.g, self.g.tfl

        def tensor_map(name: str, index: int) -> Any:
            entry = tfl.TensorMapT()
            entry.name, entry.tensorIndex = name, index
            return entry

        outputs = []
        if logits is not None:
            g.subgraph.tensors[logits].name = "logits"
            outputs.append(tensor_map("logits", logits))
        inputs = [
            tensor_map("tokens", self.tokens),
            tensor_map("input_pos", self.input_pos),
            tensor_map("mask", self.mask),
        ]
        for i in range(self.n_layer):
            for kind, slot in (("k", 0), ("v", 1)):
                inputs.append(tensor_map(f"kv_cache_{kind}_{i}", self.caches_in[i][slot]))
                outputs.append(tensor_map(f"kv_cache_{kind}_{i}", self.caches_out[i][slot]))
        signature = tfl.SignatureDefT()
        signature.signatureKey = self.key
        signature.subgraphIndex = len(self.model.subgraphs)
        signature.inputs, signature.outputs = inputs, outputs
        g.subgraph.outputs = [entry.tensorIndex for entry in outputs]
        self.model.subgraphs.append(g.subgraph)
        self.model.signatures.append(signature)


class Shape(Protocol):
    """What every architecture's hyper-parameters say of the signatures' inputs."""

    @property
    def n_layer(self) -> int: ...

    @property
    def n_head(self) -> int: ...

    @property
    def n_head_kv(self) -> int: ...

    @property
    def head_dim(self) -> int: ...


def tflite_model(
    weights: Mapping[str, Weight],
    shape: Shape,
    context: int,
    prefill_lengths: Sequence[int],
    forward: Callable[[Signature], int | None],
    layout: CacheLayout | None = None,
) -> bytes:
    """The model of one architecture: a `prefill_<n>` signature per length, then `decode`,
    each built by `forward` on the signature's inputs (it returns decode's logits, None
    for a prefill), the weights' buffers shared by all of them. `layout` (default: every
    layer's caches of the context's rows) sizes each layer's caches."""
    layout = layout or CacheLayout.full(shape.n_layer, context)
    model = Model(capacity=sum(w.nbytes for w in weights.values()))
    for n, decode in [*((n, False) for n in prefill_lengths), (1, True)]:
        s = Signature(
            model,
            weights=weights,
            n=n,
            decode=decode,
            context=context,
            layout=layout,
            heads=shape.n_head,
            kv_heads=shape.n_head_kv,
            head_dim=shape.head_dim,
        )
        s.finish(forward(s))
    return model.to_bytes()
