# Cross-check bmoe-gguf output with llama.cpp's own Python reader (gguf-py GGUFReader).
import json, os, subprocess, sys
from gguf import GGUFReader

B = "/work/targets/gguf/release/bmoe-bench"
for first in sys.argv[1:]:
    info = json.loads(subprocess.check_output([B, "model", "inspect", "--json", first]))
    for si, shard in enumerate(info["shards"]):
        path = shard["path"]
        r = GGUFReader(path)
        assert os.path.getsize(path) == shard["file_len"]
        ours = {t["name"]: t for l in info["layers"] for t in l["expert_tensors"] if t["shard"] == si}
        n_ok = 0
        for t in r.tensors:
            if t.name in ours:
                o = ours[t.name]
                assert o["file_offset"] == t.data_offset, (t.name, o["file_offset"], t.data_offset)
                assert o["n_bytes"] == t.n_bytes, t.name
                assert o["ggml_type"] == t.tensor_type.name, (o["ggml_type"], t.tensor_type.name)
                assert o["dims"] == [int(x) for x in t.shape], (o["dims"], t.shape)
                n_ok += 1
        assert n_ok == len(ours), (n_ok, len(ours))
        f = r.fields
        ntok = len(f["tokenizer.ggml.tokens"].data) if "tokenizer.ggml.tokens" in f else 0
        print(f"{os.path.basename(path)}: gguf-py reads {len(r.tensors)} tensors, {len(f)} fields, tokens={ntok}; "
              f"{n_ok} expert tensors agree with bmoe ModelInfo (offset, bytes, type, dims)")
