/* chat.c — the five chat prompt formats we know, picked from a GGUF's tokenizer.chat_template or by name.
 *
 * Like llama.cpp's llm_chat_detect_template we do not run Jinja: a template is recognised by its markers, checked in
 * llama.cpp's order: "<|im_start|>" → ChatML (Qwen2/3/3.5 too), "[INST]" → Llama 2, "<start_of_turn>" → Gemma,
 * "<|start_header_id|>" + "<|end_header_id|>" → Llama 3. The rendered prompt has no BOS (tokenizing with add_special
 * adds it) and its special-token text must be tokenized with parse_special. Formats, as llm_chat_apply_template:
 *   ChatML   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
 *   Llama 2  [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s><s>[INST] {user} [/INST]
 *            (Meta's reference chat_completion format; the system text goes inside the first instruction)
 *   Llama 3  <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|> ...
 *            <|start_header_id|>assistant<|end_header_id|>\n\n
 *   Gemma    <start_of_turn>user\n{system, trimmed}\n\n{content, trimmed}<end_of_turn>\n ... <start_of_turn>model\n
 *            (no system turn: the system texts, trimmed and joined, open the next non-model turn; "assistant" is
 *            written "model")
 *   Gemma 4  [<|turn>system\n{first message if system, trimmed}<turn|>\n] <|turn>{role}\n{content, trimmed}<turn|>\n
 *            ... <|turn>model\n<|channel>thought\n<channel|>  (google-gemma-4's Jinja template without tools or
 *            thinking, which llama.cpp renders with its Jinja engine: "assistant" is written "model", a model turn
 *            right after an assistant message continues it, thoughts <|channel>..<channel|> are dropped from model
 *            turns; "<|turn>" in a template picks it, before Gemma 3's "<start_of_turn>")
 *
 * Rendering also marks which bytes are the template's own: tr_chat_tokenize lets only those become control
 * tokens, so a message that contains "<|im_end|>" cannot close its turn (prompt injection), while the text runs
 * are tokenized exactly as in the whole rendered string. Roles count as message text. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

tr_chat_template tr_chat_template_detect(const tr_gguf *gguf) {
    const char *t = gguf ? tr_gguf_get_str(gguf, "tokenizer.chat_template", NULL) : NULL;
    if (!t) return TR_CHAT_NONE;
    if (strstr(t, "<|im_start|>")) return TR_CHAT_CHATML;
    if (strstr(t, "[INST]")) return TR_CHAT_LLAMA2;
    if (strstr(t, "<|turn>")) return TR_CHAT_GEMMA4;
    if (strstr(t, "<start_of_turn>")) return TR_CHAT_GEMMA;
    if (strstr(t, "<|start_header_id|>") && strstr(t, "<|end_header_id|>")) return TR_CHAT_LLAMA3;
    return TR_CHAT_NONE;
}

tr_status tr_chat_template_from_name(const char *name, tr_chat_template *out) {
    if (!name || !out) return tr_fail(TR_ERR_ARG, "tr_chat_template_from_name: NULL argument");
    if (strcmp(name, "chatml") == 0) *out = TR_CHAT_CHATML;
    else if (strcmp(name, "llama2") == 0 || strcmp(name, "llama-2") == 0) *out = TR_CHAT_LLAMA2;
    else if (strcmp(name, "llama3") == 0 || strcmp(name, "llama-3") == 0) *out = TR_CHAT_LLAMA3;
    else if (strcmp(name, "gemma") == 0) *out = TR_CHAT_GEMMA;
    else if (strcmp(name, "gemma4") == 0) *out = TR_CHAT_GEMMA4;
    else if (strcmp(name, "none") == 0) *out = TR_CHAT_NONE;
    else return tr_fail(TR_ERR_ARG, "unknown chat template '%s' (known: chatml, llama2, llama3, gemma, gemma4)", name);
    return TR_OK;
}

const char *tr_chat_template_name(tr_chat_template t) {
    switch (t) {
    case TR_CHAT_CHATML: return "chatml";
    case TR_CHAT_LLAMA2: return "llama2";
    case TR_CHAT_LLAMA3: return "llama3";
    case TR_CHAT_GEMMA: return "gemma";
    case TR_CHAT_GEMMA4: return "gemma4";
    default: return "none";
    }
}

/* The rendered prompt and, per byte, whether the template wrote it (1) or a message did (0). */
typedef struct sbuf {
    char *s;
    uint8_t *tmpl;
    size_t n, cap;
    bool oom;
} sbuf;

static void add(sbuf *b, const char *s, size_t n, bool tmpl) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *ns = realloc(b->s, cap);
        if (ns) b->s = ns;
        uint8_t *nt = ns ? realloc(b->tmpl, cap) : NULL;
        if (!nt) {
            b->oom = true;
            return;
        }
        b->tmpl = nt;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    memset(b->tmpl + b->n, tmpl, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void adds(sbuf *b, const char *s) { add(b, s, strlen(s), true); }  /* the template's own text */
static void addm(sbuf *b, const char *s) { add(b, s, strlen(s), false); } /* a message's text */

/* s without leading and trailing ASCII whitespace: *n bytes from the returned pointer. */
static const char *trim(const char *s, size_t *n) {
    size_t len = strlen(s);
    while (len > 0 && isspace((unsigned char)*s)) s++, len--;
    while (len > 0 && isspace((unsigned char)s[len - 1])) len--;
    *n = len;
    return s;
}

/* Content without leading and trailing whitespace (Llama 2, Llama 3 and Gemma strip messages). */
static void add_trimmed(sbuf *b, const char *s) {
    size_t n;
    s = trim(s, &n);
    add(b, s, n, false);
}

static void render_chatml(sbuf *b, const tr_chat_message *m, size_t n, bool add_assistant) {
    for (size_t i = 0; i < n; i++) {
        adds(b, "<|im_start|>");
        addm(b, m[i].role);
        adds(b, "\n");
        addm(b, m[i].content);
        adds(b, "<|im_end|>\n");
    }
    if (add_assistant) adds(b, "<|im_start|>assistant\n");
}

static void render_llama3(sbuf *b, const tr_chat_message *m, size_t n, bool add_assistant) {
    for (size_t i = 0; i < n; i++) {
        adds(b, "<|start_header_id|>");
        addm(b, m[i].role);
        adds(b, "<|end_header_id|>\n\n");
        add_trimmed(b, m[i].content);
        adds(b, "<|eot_id|>");
    }
    if (add_assistant) adds(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Gemma has no system turn: as in llama.cpp, the system texts (trimmed, joined) open the next turn that is not the
 * model's, followed by a blank line; system text still waiting at the end is dropped. */
static void render_gemma(sbuf *b, const tr_chat_message *m, size_t n, bool add_assistant) {
    size_t waiting = n; /* the first system message not placed yet; n: none */
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m[i].role, "system") == 0) {
            if (waiting == n) waiting = i;
            continue;
        }
        bool assistant = strcmp(m[i].role, "assistant") == 0;
        adds(b, "<start_of_turn>");
        if (assistant) adds(b, "model");
        else addm(b, m[i].role);
        adds(b, "\n");
        if (waiting < n && !assistant && strcmp(m[i].role, "model") != 0) {
            size_t before = b->n; /* the waiting system messages lie in [waiting, i), maybe with model turns between */
            for (size_t k = waiting; k < i; k++)
                if (strcmp(m[k].role, "system") == 0) add_trimmed(b, m[k].content);
            if (b->n > before) { /* llama.cpp places a non-empty system text only */
                adds(b, "\n\n");
                waiting = n;
            }
        }
        add_trimmed(b, m[i].content);
        adds(b, "<end_of_turn>\n");
    }
    if (add_assistant) adds(b, "<start_of_turn>model\n");
}

/* A model turn's text without its thoughts (each "<|channel>..." up to "<channel|>"), trimmed: the template's
 * strip_thinking. */
static void add_without_thoughts(sbuf *b, const char *s) {
    char *kept = malloc(strlen(s) + 1);
    if (!kept) {
        b->oom = true;
        return;
    }
    size_t k = 0;
    for (const char *part = s;;) { /* the parts between "<channel|>" markers */
        const char *end = strstr(part, "<channel|>");
        const size_t len = end ? (size_t)(end - part) : strlen(part);
        const char *open = strstr(part, "<|channel>");
        const size_t keep = open && open < part + len ? (size_t)(open - part) : len;
        memcpy(kept + k, part, keep);
        k += keep;
        if (!end) break;
        part = end + strlen("<channel|>");
    }
    kept[k] = '\0';
    add_trimmed(b, kept);
    free(kept);
}

static void render_gemma4(sbuf *b, const tr_chat_message *m, size_t n, bool add_assistant) {
    size_t first = 0;
    if (n > 0 && (strcmp(m[0].role, "system") == 0 || strcmp(m[0].role, "developer") == 0)) {
        adds(b, "<|turn>system\n");
        add_trimmed(b, m[0].content);
        adds(b, "<turn|>\n");
        first = 1;
    }
    const char *prev = NULL; /* the previous message's role */
    for (size_t i = first; i < n; i++) {
        if (strcmp(m[i].role, "tool") == 0) continue; /* the template renders tool results with their calls only */
        const bool assistant = strcmp(m[i].role, "assistant") == 0, model = assistant || strcmp(m[i].role, "model") == 0;
        if (!(model && prev && strcmp(prev, "assistant") == 0)) { /* not a continued model turn */
            adds(b, "<|turn>");
            if (assistant) adds(b, "model");
            else addm(b, m[i].role);
            adds(b, "\n");
        }
        if (model) add_without_thoughts(b, m[i].content);
        else add_trimmed(b, m[i].content);
        adds(b, "<turn|>\n");
        prev = m[i].role;
    }
    if (add_assistant) adds(b, "<|turn>model\n<|channel>thought\n<channel|>");
}

static void render_llama2(sbuf *b, const tr_chat_message *m, size_t n, bool add_assistant) {
    bool in_turn = false;  /* an [INST] is open and waits for its user text */
    for (size_t i = 0; i < n; i++) {
        bool is_system = strcmp(m[i].role, "system") == 0, is_user = strcmp(m[i].role, "user") == 0;
        if (is_system || is_user) {
            if (!in_turn) {
                adds(b, b->n > 0 ? "<s>[INST] " : "[INST] ");
                in_turn = true;
            }
            if (is_system) {
                adds(b, "<<SYS>>\n");
                add_trimmed(b, m[i].content);
                adds(b, "\n<</SYS>>\n\n");
            } else {
                add_trimmed(b, m[i].content);
                adds(b, " [/INST]");
                in_turn = false;
            }
        } else {
            adds(b, " ");
            add_trimmed(b, m[i].content);
            adds(b, " </s>");
        }
    }
    (void)add_assistant; /* the assistant's turn is open right after [/INST] */
}

static tr_status render(tr_chat_template t, const tr_chat_message *messages, size_t n_messages, bool add_assistant,
                        sbuf *b) {
    if (n_messages > 0 && !messages) return tr_fail(TR_ERR_ARG, "chat: NULL messages");
    for (size_t i = 0; i < n_messages; i++)
        if (!messages[i].role || !messages[i].content)
            return tr_fail(TR_ERR_ARG, "chat message %zu has no role or content", i);
    *b = (sbuf){0};
    adds(b, "");
    switch (t) {
    case TR_CHAT_CHATML: render_chatml(b, messages, n_messages, add_assistant); break;
    case TR_CHAT_LLAMA2: render_llama2(b, messages, n_messages, add_assistant); break;
    case TR_CHAT_LLAMA3: render_llama3(b, messages, n_messages, add_assistant); break;
    case TR_CHAT_GEMMA: render_gemma(b, messages, n_messages, add_assistant); break;
    case TR_CHAT_GEMMA4: render_gemma4(b, messages, n_messages, add_assistant); break;
    default: free(b->s), free(b->tmpl); return tr_fail(TR_ERR_ARG, "no chat template chosen");
    }
    if (b->oom) {
        free(b->s);
        free(b->tmpl);
        return tr_fail(TR_ERR_NOMEM, "chat prompt");
    }
    return TR_OK;
}

tr_status tr_chat_apply(tr_chat_template t, const tr_chat_message *messages, size_t n_messages, bool add_assistant,
                        char **out) {
    if (!out) return tr_fail(TR_ERR_ARG, "tr_chat_apply: NULL argument");
    *out = NULL;
    sbuf b;
    tr_status st = render(t, messages, n_messages, add_assistant, &b);
    if (st != TR_OK) return st;
    free(b.tmpl);
    *out = b.s;
    return TR_OK;
}

tr_status tr_chat_tokenize(const tr_vocab *vocab, tr_chat_template t, const tr_chat_message *messages,
                           size_t n_messages, bool add_assistant, bool add_special, int32_t *tokens, int32_t cap,
                           int32_t *n_tokens) {
    if (n_tokens) *n_tokens = 0;
    if (!vocab || !n_tokens || cap < 0 || (cap > 0 && !tokens))
        return tr_fail(TR_ERR_ARG, "tr_chat_tokenize: invalid argument");
    sbuf b;
    tr_status st = render(t, messages, n_messages, add_assistant, &b);
    if (st != TR_OK) return st;
    const tr_tokenize_params p = {.add_special = add_special, .parse_special = true};
    st = tokenize_masked(vocab, b.s, b.n, &p, b.tmpl, tokens, cap, n_tokens);
    free(b.s);
    free(b.tmpl);
    return st;
}
