# add_kv_scales.py SRC DST K V: copy the checkpoint directory SRC to DST with every layer's
# self_attn.k_scale = K and self_attn.v_scale = V (F32 scalars, as a float8 checkpoint's
# calibrated KV cache scales) appended to its single model.safetensors.
import json, os, shutil, struct, sys
src, dst, k, v = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
shutil.copytree(src, dst, dirs_exist_ok=True)
f = os.path.join(dst, 'model.safetensors')
raw = open(f, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
layers = json.load(open(os.path.join(src, 'config.json')))['num_hidden_layers']
extra = b''
for l in range(layers):
    for name, val in (('k_scale', k), ('v_scale', v)):
        off = len(data) + len(extra)
        hdr[f'model.layers.{l}.self_attn.{name}'] = {'dtype': 'F32', 'shape': [], 'data_offsets': [off, off + 4]}
        extra += struct.pack('<f', val)
h = json.dumps(hdr).encode(); h += b' ' * ((8 - len(h) % 8) % 8)
open(f, 'wb').write(struct.pack('<Q', len(h)) + h + data + extra)
