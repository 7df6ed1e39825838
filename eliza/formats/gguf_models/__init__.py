"""A GGUF model as the runtimes' converters read it, written once for all of them.

- `header`: the file opened and its architecture checked; its keys read with errors that
  name the file, the key and what would fix it;
- `tensors`: every tensor as float32 in its (rows, columns) layout, whatever its type;
- `affine`: the quantization the runtimes deploy, shared by the converters: a quantized
  tensor as MLX affine groups (the GGUF's own blocks where they are such groups) and as
  XNNPACK's int8 per output channel;
- one module per architecture (`llama`, `gemma3`): the hyper-parameters of that
  architecture's forward pass, read from its keys, and the tensors it expects.

A converter (the MLX-LM weights, the .litertlm) has one file per architecture over these;
a new architecture is one more module here and one more file per converter.
"""
