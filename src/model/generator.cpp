#include "ztrain/model/generator.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "model_family.hpp"

namespace zt {

ResidentWeights::ResidentWeights(const ModelLayout& layout, Backend& backend)
    : m_backend(backend), m_numel(layout.unit_numel) {
    for (size_t n : m_numel) m_units.push_back(backend.alloc_floats(n));
}

ResidentWeights::~ResidentWeights() {
    for (float* p : m_units) m_backend.free(p);
}

void ResidentWeights::set(int unit, size_t begin, const float* data, size_t n) {
    const size_t u = static_cast<size_t>(unit);
    ZT_REQUIRE(u < m_units.size() && begin <= m_numel[u] && n <= m_numel[u] - begin, "ResidentWeights: elements [",
               begin, ", ", begin + n, ") are outside unit ", unit);
    m_backend.to_device(m_units[u] + begin, data, n * sizeof(float));
}

float* ResidentWeights::grads(int unit) {
    throw Error(str("ResidentWeights: unit ", unit, " has no gradients (inference only)"));
}

int sample_token(const float* logits, int V, const SamplingOptions& opt, uint64_t seed, uint64_t index) {
    ZT_REQUIRE(V > 0, "sample_token: empty vocabulary");
    if (opt.temperature <= 0.0 || opt.top_k == 1) {
        return static_cast<int>(std::max_element(logits, logits + V) - logits);
    }
    // Candidates by decreasing logit (ties: lower id first, so the order is deterministic).
    std::vector<int> ids(static_cast<size_t>(V));
    std::iota(ids.begin(), ids.end(), 0);
    const size_t keep = opt.top_k > 0 ? std::min(static_cast<size_t>(opt.top_k), ids.size()) : ids.size();
    const auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(), by_logit);
    ids.resize(keep);
    std::vector<double> p(keep);
    double total = 0.0;
    for (size_t i = 0; i < keep; ++i) {
        p[i] = std::exp((static_cast<double>(logits[ids[i]]) - logits[ids[0]]) / opt.temperature);
        total += p[i];
    }
    // Nucleus: the shortest prefix whose probability reaches top_p (at least one token).
    size_t n = keep;
    if (opt.top_p < 1.0) {
        double mass = 0.0;
        for (n = 0; n < keep;) {
            mass += p[n++] / total;
            if (mass >= opt.top_p) break;
        }
        total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n), 0.0);
    }
    double u = total * random_uniform(seed, static_cast<uint64_t>(RandomStream::kSample), index);
    for (size_t i = 0; i < n; ++i) {
        u -= p[i];
        if (u < 0) return ids[i];
    }
    return ids[n - 1];
}

Generator::Generator(const ModelConfig& cfg, Backend& backend, int logits_rows, int context, int max_rows)
    : m_cfg(cfg), m_backend(backend), m_layout(make_model_layout(cfg)) {
    m_context = context > 0 ? context : cfg.seq_len;
    m_max_rows = max_rows > 0 ? max_rows : m_context;
    ZT_REQUIRE(m_context >= 1 && logits_rows >= 1 && logits_rows <= m_max_rows, "Generator: context ", m_context,
               ", max_rows ", m_max_rows, " and logits_rows ", logits_rows,
               " must satisfy context >= 1 and 1 <= logits_rows <= max_rows");
    m_logits_rows = logits_rows;
    m_decoder = family_traits(cfg).make_decoder(cfg, m_layout, backend, m_max_rows);
    const size_t T = static_cast<size_t>(m_context);
    const size_t rows = static_cast<size_t>(m_max_rows);
    const size_t C = static_cast<size_t>(cfg.n_embd);
    const size_t KV = static_cast<size_t>(cfg.kv_heads()) * static_cast<size_t>(cfg.head_size());
    auto take = [&](size_t n) {
        float* p = backend.alloc_floats(n);
        m_buffers.push_back(p);
        return p;
    };
    for (int l = 0; l < cfg.n_layer; ++l) {
        m_k.push_back(take(T * KV));
        m_v.push_back(take(T * KV));
    }
    m_x = take(rows * C);
    m_normed = take(static_cast<size_t>(logits_rows) * C);
    m_logits = take(static_cast<size_t>(logits_rows) * static_cast<size_t>(cfg.padded_vocab()));
    m_tokens = static_cast<int32_t*>(backend.alloc_bytes(rows * sizeof(int32_t)));
    m_buffers.push_back(m_tokens);
    m_targets = static_cast<int32_t*>(backend.alloc_bytes(static_cast<size_t>(logits_rows) * sizeof(int32_t)));
    m_buffers.push_back(m_targets);
    m_losses = take(static_cast<size_t>(logits_rows));
    // LoRA: each block runs with its adapters merged into a copy of its unit (the decoders
    // run a unit's products as they are).
    m_lora = std::make_unique<LoraAdapters>(m_layout);
    if (m_lora->frozen_base()) {
        m_merged = take(m_layout.unit_numel[1]);
        m_scaled_b = take(static_cast<size_t>(m_lora->widest()) * static_cast<size_t>(m_lora->max_rank()));
    }
}

Generator::~Generator() {
    m_decoder.reset();
    for (void* p : m_buffers) m_backend.free(p);
}

void Generator::forward(UnitStore& store, const int32_t* tokens, int n, int keep_logits) {
    ZT_REQUIRE(n >= 1 && n <= m_max_rows && m_pos + n <= std::min(m_context, m_cfg.seq_len), "Generator::forward: ",
               n, " tokens at position ", m_pos, " exceed max_rows ", m_max_rows, ", the context of ", m_context,
               " or seq_len ", m_cfg.seq_len);
    ZT_REQUIRE(keep_logits >= 0 && keep_logits <= m_logits_rows, "Generator::forward: keep_logits ", keep_logits,
               " outside [0, ", m_logits_rows, "]");
    run(store, tokens, DecodeRows{{DecodeSpan{0, m_pos, n}}}, std::min(n, keep_logits > 0 ? keep_logits : m_logits_rows));
    m_pos += n;
}

void Generator::forward_branches(UnitStore& store, const int32_t* tokens, const std::vector<int>& lengths) {
    std::vector<DecodeSpan> spans;
    for (int len : lengths) spans.push_back(DecodeSpan{0, m_pos, len});
    forward_spans(store, tokens, spans, 0);
}

void Generator::forward_spans(UnitStore& store, const int32_t* tokens, const std::vector<DecodeSpan>& spans,
                              int keep_per_span) {
    DecodeRows rows{spans};
    int kept = 0;
    for (const DecodeSpan& s : spans) {
        ZT_REQUIRE(s.length >= 1 && s.cache >= 0 && s.pos >= 0 && s.cache + s.pos + s.length <= m_context &&
                       s.pos + s.length <= m_cfg.seq_len,
                   "Generator::forward_spans: a span of ", s.length, " tokens at position ", s.pos, " from cache row ",
                   s.cache, " is empty or exceeds the context of ", m_context, " or seq_len ", m_cfg.seq_len);
        kept += keep_per_span > 0 ? std::min(keep_per_span, s.length) : s.length;
    }
    const int n = rows.total();
    ZT_REQUIRE(!spans.empty() && keep_per_span >= 0 && n <= m_max_rows && kept <= m_logits_rows,
               "Generator::forward_spans: ", n, " rows (", kept, " kept) exceed max_rows ", m_max_rows,
               " or logits_rows ", m_logits_rows);
    run(store, tokens, rows, keep_per_span);
}

void Generator::run(UnitStore& store, const int32_t* tokens, const DecodeRows& rows, int keep_per_span) {
    const int L = m_cfg.n_layer;
    const size_t C = static_cast<size_t>(m_cfg.n_embd);
    const int n = rows.total();
    m_backend.to_device(m_tokens, tokens, static_cast<size_t>(n) * sizeof(int32_t));
    const float* unit0 = store.acquire(0);
    m_decoder->embed(m_backend, m_x, m_tokens, unit0, rows);
    store.release(0);
    for (int l = 0; l < L; ++l) {
        const float* w = store.acquire(1 + l);
        if (m_merged != nullptr) {
            m_lora->merge_into(m_backend, m_merged, w, m_layout.unit_numel[static_cast<size_t>(1 + l)], m_scaled_b);
            w = m_merged;
        }
        m_decoder->block(m_backend, w, m_x, KvLayer{m_k[static_cast<size_t>(l)], m_v[static_cast<size_t>(l)]}, rows);
        store.release(1 + l);
    }
    // Only the rows whose logits are wanted (each span's last keep_per_span, 0: all) go
    // through the final norm and the LM head, one run of adjacent rows at a time.
    const float* final_w = store.acquire(L + 1);
    int kept = 0;
    int first = 0;
    int run_from = 0;
    int run_rows = 0;
    auto flush = [&]() {
        if (run_rows == 0) return;
        m_decoder->final_norm(m_backend, m_normed + static_cast<size_t>(kept) * C,
                              m_x + static_cast<size_t>(run_from) * C, final_w, run_rows);
        kept += run_rows;
        run_rows = 0;
    };
    for (const DecodeSpan& s : rows.spans) {
        const int k = keep_per_span > 0 ? std::min(keep_per_span, s.length) : s.length;
        const int from = first + s.length - k;
        if (from != run_from + run_rows) flush();
        if (run_rows == 0) run_from = from;
        run_rows += k;
        first += s.length;
    }
    flush();
    store.release(L + 1);
    const float* head = store.acquire(0) + m_layout.head_offset;
    m_backend.matmul_forward(m_logits, m_normed, head, nullptr, kept, static_cast<int>(C), m_cfg.padded_vocab());
    store.release(0);
    m_last_rows = kept;
}

void Generator::logits_row_to_host(int row_from_last, float* out) const {
    ZT_REQUIRE(row_from_last >= 0 && row_from_last < m_last_rows, "Generator: no logits kept for row ",
               row_from_last, " from the last");
    const size_t Vp = static_cast<size_t>(m_cfg.padded_vocab());
    const size_t row = static_cast<size_t>(m_last_rows - 1 - row_from_last);
    m_backend.to_host(out, m_logits + row * Vp, Vp * sizeof(float));
}

void Generator::row_losses(const int32_t* targets, float* losses) {
    const size_t n = static_cast<size_t>(m_last_rows);
    m_backend.to_device(m_targets, targets, n * sizeof(int32_t));
    // dloss 0: the logits stay as they are.
    m_backend.softmax_cross_entropy(m_losses, m_logits, m_targets, m_last_rows, m_cfg.vocab_size, m_cfg.padded_vocab(),
                                    0.f);
    m_backend.to_host(losses, m_losses, n * sizeof(float));
}

}  // namespace zt
