/* test_server_stop.c — `stop` on /v1/completions and /v1/chat/completions (stories260K, ChatML template): the text
 * ends right before the first stop string, which is never sent — not in the whole reply, not in any streamed
 * chunk, not even in part —, with finish_reason "stop"; the streamed text equals the whole one; a stop string made
 * of several tokens' text is caught; the earliest of several wins; one that never occurs changes nothing; the
 * tokens generated stay in token_ids and completion_tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "support/http_call.h"
#include "support/server_fixture.h"
#include "tokroute.h"

static tr_model *model;
static tr_server *srv;
static int port;

static int setup(void **state) {
    (void)state;
    tr_server_params p = tr_server_default_params();
    p.n_ctx = 256;
    p.chat_template = TR_CHAT_CHATML;
    return server_fixture_serve(p, &model, &srv, &port);
}

static int teardown(void **state) {
    (void)state;
    return server_fixture_free(model, srv);
}

typedef struct answer {
    char text[8192];
    char finish[16];
    int n_ids, completion_tokens;
    int chunks_with_stop; /* streamed chunks whose text holds the stop string's first 2 bytes or more */
} answer;

static const char *choice_text(const cJSON *choice, bool chat) {
    const cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "message"), "content")
                          : cJSON_GetObjectItem(choice, "text");
    if (!t && chat) t = cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "delta"), "content");
    return cJSON_IsString(t) ? t->valuestring : "";
}

/* Asks path with body (a JSON object's members, without braces) plus "stream": stream; collects the answer. */
static void ask(const char *path, const char *members, bool stream, const char *stop_probe, answer *a) {
    const bool chat = strstr(path, "chat") != NULL;
    char body[2048], *out = NULL;
    snprintf(body, sizeof body, "{%s, \"stream\": %s%s}", members, stream ? "true" : "false",
             stream ? ", \"stream_options\": {\"include_usage\": true}" : "");
    memset(a, 0, sizeof *a);
    assert_int_equal(http_call(port, "POST", path, body, &out), 200);
    char *at = out;
    while (at && *at) {
        char *event = stream ? strstr(at, "data: ") : at;
        if (!event) break;
        if (stream) event += 6;
        char *end = stream ? strstr(event, "\n\n") : NULL;
        if (end) *end = 0;
        at = end ? end + 2 : NULL;
        if (strcmp(event, "[DONE]") == 0) break;
        cJSON *j = cJSON_Parse(event);
        assert_non_null(j);
        const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        if (choice) {
            const char *t = choice_text(choice, chat);
            if (stop_probe && strlen(stop_probe) >= 2 && strstr(t, stop_probe) ) a->chunks_with_stop++;
            snprintf(a->text + strlen(a->text), sizeof a->text - strlen(a->text), "%s", t);
            a->n_ids += cJSON_GetArraySize(cJSON_GetObjectItem(choice, "token_ids"));
            const cJSON *f = cJSON_GetObjectItem(choice, "finish_reason");
            if (cJSON_IsString(f)) snprintf(a->finish, sizeof a->finish, "%s", f->valuestring);
        }
        const cJSON *u = cJSON_GetObjectItem(j, "usage");
        if (cJSON_IsObject(u)) a->completion_tokens = (int)cJSON_GetObjectItem(u, "completion_tokens")->valuedouble;
        cJSON_Delete(j);
        if (!stream) break;
    }
    free(out);
}

/* A stop string from the middle of text: the n bytes starting at the word that begins after byte from. */
static void pick_stop(const char *text, size_t from, size_t n, char *stop) {
    const char *p = strchr(text + from, ' ');
    assert_non_null(p);
    assert_true(strlen(p) > n);
    memcpy(stop, p, n);
    stop[n] = 0;
}

static void check_stopped(const char *path, const char *base, const answer *full, const char *stop) {
    const char *hit = strstr(full->text, stop);
    assert_non_null(hit);
    const size_t want = (size_t)(hit - full->text);
    char members[1024];
    snprintf(members, sizeof members, "%s, \"stop\": [\"zzzq\", \"%s\"]", base, stop);
    for (int stream = 0; stream < 2; stream++) {
        answer a;
        ask(path, members, stream, stop, &a);
        assert_int_equal(strlen(a.text), want);
        assert_memory_equal(a.text, full->text, want);
        assert_null(strstr(a.text, stop));
        assert_string_equal(a.finish, "stop");
        assert_int_equal(a.chunks_with_stop, 0);
        if (!strstr(path, "chat")) /* the tokens that made the stop string are listed and counted */
            assert_int_equal(a.n_ids, a.completion_tokens);
        assert_true(a.completion_tokens < full->completion_tokens);
    }
}

static void completions_stop(void **state) {
    (void)state;
    const char *base = "\"prompt\": \"Once upon a time\", \"max_tokens\": 60, \"temperature\": 0";
    answer full, again;
    ask("/v1/completions", base, false, NULL, &full);
    assert_true(strlen(full.text) > 40);
    assert_string_equal(full.finish, "length");
    char stop[16];
    pick_stop(full.text, 10, 6, stop); /* " word" across tokens: several tokens' text */
    check_stopped("/v1/completions", base, &full, stop);
    pick_stop(full.text, 20, 2, stop); /* a short one: the earliest occurrence wins */
    check_stopped("/v1/completions", base, &full, stop);
    /* a stop string that never occurs: the same answer, streamed too */
    char members[512];
    snprintf(members, sizeof members, "%s, \"stop\": \"qqqzx\"", base);
    ask("/v1/completions", members, false, NULL, &again);
    assert_string_equal(again.text, full.text);
    assert_string_equal(again.finish, "length");
    ask("/v1/completions", members, true, NULL, &again);
    assert_string_equal(again.text, full.text);
}

static void chat_stop(void **state) {
    (void)state;
    const char *base = "\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story.\"}], \"max_tokens\": 60, "
                       "\"temperature\": 0";
    answer full;
    ask("/v1/chat/completions", base, false, NULL, &full);
    if (strlen(full.text) < 30) fail_msg("the chat answer is too short to cut: '%s'", full.text);
    char stop[16];
    pick_stop(full.text, 8, 4, stop);
    check_stopped("/v1/chat/completions", base, &full, stop);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(completions_stop),
        cmocka_unit_test(chat_stop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
