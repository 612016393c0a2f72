// Throwaway llama.cpp smoke check for bmoe-gguf synthetic models (not part of the repo):
// load, tokenize ChatML + think tags, apply the chat template, decode N pseudo-random tokens one
// at a time, count non-finite logits, report the router's expert histogram is not tested here.
#include "llama.h"
#include "ggml.h"
#include <map>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static std::vector<long> g_hist;
static std::map<int, std::vector<long>> g_layers;
static bool g_decode = false;
static bool cb(struct ggml_tensor * t, bool ask, void *) {
    if (strncmp(t->name, "ffn_moe_topk-", 13) != 0) return ask ? false : true;
    if (ask) return true;
    if (t->type != GGML_TYPE_I32) return true;
    int il = atoi(t->name + 13);
    for (int64_t j = 0; j < t->ne[1]; j++)
        for (int64_t k = 0; k < t->ne[0]; k++) {
            int32_t id = *(int32_t *) ((char *) t->data + j * t->nb[1] + k * t->nb[0]);
            if (id < 0) continue;
            if (il == 0) { if ((size_t) id >= g_hist.size()) g_hist.resize(id + 1); g_hist[id]++; }
            if (g_decode) { auto & h = g_layers[il]; if ((size_t) id >= h.size()) h.resize(id + 1); h[id]++; }
        }
    return true;
}

int main(int argc, char ** argv) {
    if (argc < 2) { fprintf(stderr, "usage: check MODEL [N]\n"); return 2; }
    const int n_tok = argc > 2 ? atoi(argv[2]) : 1024;
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { printf("RESULT load_failed\n"); return 1; }
    auto cp = llama_context_default_params();
    cp.n_ctx = n_tok + 64;
    cp.n_batch = 512;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.cb_eval = cb;
    cp.cb_eval_user_data = nullptr;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { printf("RESULT ctx_failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    const char * tmpl = llama_model_chat_template(model, nullptr);
    llama_chat_message msgs[1] = {{"user", "hello the world"}};
    std::vector<char> buf(4096);
    int n = llama_chat_apply_template(tmpl, msgs, 1, true, buf.data(), buf.size());
    std::string prompt = n > 0 ? std::string(buf.data(), n) : std::string("(template failed)");
    prompt += "<think>\nhi</think>\n";
    std::vector<llama_token> toks(1024);
    int nt = llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), toks.size(), false, true);
    toks.resize(nt > 0 ? nt : 0);
    printf("template_len=%d prompt_tokens=%d:", n, nt);
    for (auto t : toks) printf(" %d", t);
    printf("\n");
    std::string round;
    for (auto t : toks) { char p[64]; int k = llama_token_to_piece(vocab, t, p, sizeof p, 0, true); if (k > 0) round.append(p, k); }
    printf("roundtrip_ok=%d\n", round == prompt);

    // prefill the prompt, then decode pseudo-random byte tokens one at a time
    long bad = 0; float maxabs = 0;
    if (llama_decode(ctx, llama_batch_get_one(toks.data(), toks.size()))) { printf("RESULT prefill_failed\n"); return 1; }
    uint64_t s = 1;
    g_decode = true;
    for (int i = 0; i < n_tok - (int) toks.size(); i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        llama_token tok = (llama_token) ((s >> 33) % 256);
        if (llama_decode(ctx, llama_batch_get_one(&tok, 1))) { printf("RESULT decode_failed at %d\n", i); return 1; }
        float * lg = llama_get_logits_ith(ctx, -1);
        for (int v = 0; v < n_vocab; v++) { if (!std::isfinite(lg[v])) bad++; else maxabs = fmaxf(maxabs, fabsf(lg[v])); }
    }
    printf("RESULT tokens=%d n_vocab=%d nonfinite=%ld max_abs_logit=%.3f\n", n_tok, n_vocab, bad, maxabs);
    std::vector<long> h = g_hist; std::sort(h.rbegin(), h.rend());
    long tot = 0; for (long v : h) tot += v;
    long top4 = 0; for (size_t i = 0; i < h.size() && i < 4; i++) top4 += h[i];
    printf("layer0 experts_seen=%zu routings=%ld top1_share=%.3f top4_share=%.3f\n", h.size(), tot, tot ? (double) h[0] / tot : 0.0, tot ? (double) top4 / tot : 0.0);
    for (int k : {1, 4, 8, 16}) {
        double sum = 0; int nl = 0;
        for (auto & [il, hh] : g_layers) {
            std::vector<long> v = hh; std::sort(v.rbegin(), v.rend());
            long t = 0, top = 0; for (size_t i = 0; i < v.size(); i++) { t += v[i]; if ((int) i < k) top += v[i]; }
            if (t) { sum += (double) top / t; nl++; }
        }
        printf("decode top%d_share_mean_over_layers=%.3f ", k, nl ? sum / nl : 0.0);
    }
    printf("\n");
    llama_free(ctx);
    llama_model_free(model);
    return bad ? 1 : 0;
}
