/* test_dataset.c — the dataset reader: hand-made files of every format (separators, quoting, blank lines, CRLF),
 * malformed records named by line, ranges, the real files of ../shared/data (counts, first/last examples, gold
 * answers), answer extraction on hand-written generations, and tokenizing an example for a model (plain prompt,
 * chat template, text story). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eval/dataset.h"
#include "support/fixtures.h"
#include "tokroute.h"

static dataset *parse_ok(const char *text, dataset_format fmt, int64_t first, int64_t end) {
    dataset *d = NULL;
    tr_status st = dataset_parse(text, strlen(text), "mem", fmt, first, end, &d);
    if (st != TR_OK) fail_msg("dataset_parse: %s", tr_last_error());
    assert_int_equal(dataset_get_format(d), fmt);
    return d;
}

static void parse_fails(const char *text, dataset_format fmt, tr_status want, const char *needle) {
    dataset *d = (dataset *)1;
    assert_int_equal(dataset_parse(text, strlen(text), "mem", fmt, 0, -1, &d), want);
    assert_null(d);
    if (!strstr(tr_last_error(), needle)) fail_msg("error '%s' lacks '%s'", tr_last_error(), needle);
}

static void test_names_and_ranges(void **state) {
    (void)state;
    const char *names[] = {"text", "csqa", "gsm8k", "arc", "mmlu"};
    for (int i = 0; i < 5; i++) {
        dataset_format f;
        assert_int_equal(dataset_format_from_name(names[i], &f), TR_OK);
        assert_int_equal(f, i);
        assert_string_equal(dataset_format_name(f), names[i]);
        assert_int_equal(dataset_format_has_answer(f), i != DATASET_TEXT);
    }
    dataset_format f;
    assert_int_equal(dataset_format_from_name("arc_challenge", &f), TR_OK);
    assert_int_equal(f, DATASET_ARC);
    assert_int_equal(dataset_format_from_name("squad", &f), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "known: text, csqa"));

    int64_t a, b;
    assert_int_equal(dataset_parse_range("800:1000", &a, &b), TR_OK);
    assert_true(a == 800 && b == 1000);
    assert_int_equal(dataset_parse_range("5:", &a, &b), TR_OK);
    assert_true(a == 5 && b == -1);
    assert_int_equal(dataset_parse_range(":7", &a, &b), TR_OK);
    assert_true(a == 0 && b == 7);
    assert_int_equal(dataset_parse_range("3", &a, &b), TR_OK);
    assert_true(a == 3 && b == 4);
    assert_int_equal(dataset_parse_range("4:4", &a, &b), TR_OK);
    const char *bad[] = {"", "a:b", "-1:3", "3:1", "1:2:3", "1.5:2", "99999999999999999999:"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(dataset_parse_range(bad[i], &a, &b), TR_ERR_ARG);
}

static void test_text_stories(void **state) {
    (void)state;
    const char *text = "  One.\r\n<|endoftext|>\r\n\nTwo\nlines. \n<|endoftext|>\n<|endoftext|>\n\nThree.";
    dataset *d = parse_ok(text, DATASET_TEXT, 0, -1);
    assert_int_equal(dataset_count(d), 3);
    const char *want[] = {"One.", "Two\nlines.", "Three."};
    const int64_t lines[] = {1, 4, 9};
    for (int i = 0; i < 3; i++) {
        const dataset_example *e = dataset_get(d, i);
        assert_string_equal(e->target, want[i]);
        assert_string_equal(e->prompt, "");
        assert_string_equal(e->question, "");
        assert_string_equal(e->answer, "");
        assert_int_equal(e->line, lines[i]);
        assert_int_equal(e->index, i);
        assert_int_equal(e->n_choices, 0);
    }
    assert_null(dataset_get(d, 3));
    assert_null(dataset_get(d, -1));
    dataset_free(d);

    d = parse_ok(text, DATASET_TEXT, 1, 3);
    assert_int_equal(dataset_count(d), 2);
    assert_string_equal(dataset_get(d, 0)->target, "Two\nlines.");
    assert_int_equal(dataset_get(d, 1)->index, 2);
    dataset_free(d);
    d = parse_ok(text, DATASET_TEXT, 3, 3); /* an empty range at the end is fine */
    assert_int_equal(dataset_count(d), 0);
    dataset_free(d);
    d = parse_ok("", DATASET_TEXT, 0, -1);
    assert_int_equal(dataset_count(d), 0);
    dataset_free(d);

    dataset *none = NULL;
    assert_int_equal(dataset_parse(text, strlen(text), "mem", DATASET_TEXT, 2, 5, &none), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "3 examples"));
    assert_int_equal(dataset_parse(text, strlen(text), "mem", DATASET_TEXT, 4, -1, &none), TR_ERR_RANGE);
    assert_int_equal(dataset_parse(text, strlen(text), "mem", DATASET_TEXT, 2, 1, &none), TR_ERR_ARG);
    assert_null(none);
    const char nul[] = "a\0b";
    assert_int_equal(dataset_parse(nul, 3, "mem", DATASET_TEXT, 0, -1, &none), TR_ERR_FORMAT);
    assert_non_null(strstr(tr_last_error(), "mem:1: NUL"));
}

static const char csqa_line[] =
    "{\"answerKey\": \"B\", \"question\": {\"stem\": \"Where?\", \"choices\": [{\"label\": \"A\", \"text\": \"bank\"}, "
    "{\"label\": \"B\", \"text\": \"mall\"}, {\"label\": \"C\", \"text\": \"home\"}]}}\n";

static void test_csqa(void **state) {
    (void)state;
    char text[2048];
    snprintf(text, sizeof text, "%s\n   \n%s", csqa_line, csqa_line);
    dataset *d = parse_ok(text, DATASET_CSQA, 0, -1);
    assert_int_equal(dataset_count(d), 2);
    const dataset_example *e = dataset_get(d, 1);
    assert_int_equal(e->line, 4);
    assert_string_equal(e->question, "Question: Where?\nA. bank\nB. mall\nC. home\n"
                                     "Answer with the letter of the correct choice.");
    assert_string_equal(e->prompt, "Question: Where?\nA. bank\nB. mall\nC. home\n"
                                   "Answer with the letter of the correct choice.\nAnswer:");
    assert_string_equal(e->target, "The answer is B.");
    assert_string_equal(e->answer, "B");
    assert_int_equal(e->n_choices, 3);
    assert_string_equal(e->choices[2], "home");
    dataset_free(d);

    /* Malformed records are named by line; only the selected range is parsed. */
    snprintf(text, sizeof text, "%s%s{\"answerKey\": \"B\", \"question\": 3}\n", csqa_line, csqa_line);
    parse_fails(text, DATASET_CSQA, TR_ERR_FORMAT, "mem:3: no \"question\" object");
    d = parse_ok(text, DATASET_CSQA, 0, 2);
    dataset_free(d);
    snprintf(text, sizeof text, "%s{not json\n", csqa_line);
    parse_fails(text, DATASET_CSQA, TR_ERR_FORMAT, "mem:2: not valid JSON");
    parse_fails("[1, 2]\n", DATASET_CSQA, TR_ERR_FORMAT, "mem:1: not a JSON object");
    parse_fails("{\"id\": \"x\", \"question\": {\"stem\": \"s\", \"choices\": []}}", DATASET_CSQA, TR_ERR_FORMAT,
                "the test split has no answers");
    parse_fails("{\"answerKey\": \"F\", \"question\": {\"stem\": \"s\", \"choices\": [{\"label\": \"A\", \"text\": "
                "\"x\"}, {\"label\": \"B\", \"text\": \"y\"}]}}",
                DATASET_CSQA, TR_ERR_FORMAT, "answerKey 'F'");
    parse_fails("{\"answerKey\": \"A\", \"question\": {\"stem\": \"s\", \"choices\": [{\"label\": \"B\", \"text\": "
                "\"x\"}, {\"label\": \"A\", \"text\": \"y\"}]}}",
                DATASET_CSQA, TR_ERR_FORMAT, "label 'B' (expected A)");
    parse_fails("{\"answerKey\": \"A\", \"question\": {\"stem\": \"s\", \"choices\": [{\"label\": \"A\", \"text\": 5}, "
                "{\"label\": \"B\", \"text\": \"y\"}]}}",
                DATASET_CSQA, TR_ERR_FORMAT, "choice 0 has no");
}

static void test_arc_gsm8k_mmlu(void **state) {
    (void)state;
    const char *arc = "{\"choices\": [\"red\", \"blue\", \"green\", \"grey\"], \"query\": \"Question: Sky?\", "
                      "\"gold\": 1}\n";
    dataset *d = parse_ok(arc, DATASET_ARC, 0, -1);
    const dataset_example *e = dataset_get(d, 0);
    assert_string_equal(e->question, "Question: Sky?\nA. red\nB. blue\nC. green\nD. grey\n"
                                     "Answer with the letter of the correct choice.");
    assert_string_equal(e->answer, "B");
    assert_int_equal(e->n_choices, 4);
    dataset_free(d);
    parse_fails("{\"choices\": [\"a\", \"b\"], \"query\": \"q\", \"gold\": 2}", DATASET_ARC, TR_ERR_FORMAT,
                "mem:1: \"gold\" is not a choice index in [0, 2)");
    parse_fails("{\"choices\": [\"a\", \"b\"], \"query\": \"q\", \"gold\": 0.5}", DATASET_ARC, TR_ERR_FORMAT, "gold");
    parse_fails("{\"choices\": [\"a\"], \"query\": \"q\", \"gold\": 0}", DATASET_ARC, TR_ERR_FORMAT, "1 choices");
    parse_fails("{\"choices\": [\"a\", 2], \"query\": \"q\", \"gold\": 0}", DATASET_ARC, TR_ERR_FORMAT,
                "choice 1 is not a string");

    const char *gsm = "{\"question\": \"How many?\", \"answer\": \"2 + 2 = 4\\nSo 1,204.\\n#### 1,204\"}\n";
    d = parse_ok(gsm, DATASET_GSM8K, 0, -1);
    e = dataset_get(d, 0);
    assert_string_equal(e->answer, "1204");
    assert_string_equal(e->target, "2 + 2 = 4\nSo 1,204.\n#### 1,204");
    assert_non_null(strstr(e->question, "Question: How many?\n"));
    assert_int_equal(e->n_choices, 0);
    dataset_free(d);
    parse_fails("{\"question\": \"q\", \"answer\": \"no mark\"}", DATASET_GSM8K, TR_ERR_FORMAT, "\"####\"");
    parse_fails("{\"question\": \"q\", \"answer\": \"#### many\"}", DATASET_GSM8K, TR_ERR_FORMAT, "not a number");
    parse_fails("{\"answer\": \"#### 3\"}", DATASET_GSM8K, TR_ERR_FORMAT, "no \"question\" string");

    /* Quoted fields with commas, doubled quotes and a newline; CRLF records; a blank line. */
    const char *csv = "\"Who said \"\"hi\"\", then left?\",x,\"y, z\",\"multi\nline\",w,C\r\n\r\nq2,a,b,c,d,A\n";
    d = parse_ok(csv, DATASET_MMLU, 0, -1);
    assert_int_equal(dataset_count(d), 2);
    e = dataset_get(d, 0);
    assert_string_equal(e->choices[0], "x");
    assert_string_equal(e->choices[1], "y, z");
    assert_string_equal(e->choices[2], "multi\nline");
    assert_string_equal(e->answer, "C");
    assert_non_null(strstr(e->question, "Question: Who said \"hi\", then left?\nA. x\n"));
    assert_int_equal(dataset_get(d, 1)->line, 4);
    dataset_free(d);
    parse_fails("q,a,b,c,d,A\nq,a,b,c,E\n", DATASET_MMLU, TR_ERR_FORMAT, "mem:2: 5 fields");
    parse_fails("q,a,b,c,d,E\n", DATASET_MMLU, TR_ERR_FORMAT, "answer 'E'");
    parse_fails("q,a,b,c,d,A,x,y\n", DATASET_MMLU, TR_ERR_FORMAT, "more than 7 fields");
    parse_fails("\"q,a,b,c,d,A\n", DATASET_MMLU, TR_ERR_FORMAT, "unterminated quoted field 1");
    parse_fails("\"q\"x,a,b,c,d,A\n", DATASET_MMLU, TR_ERR_FORMAT, "after quoted field 1");
    parse_fails("q\"x,a,b,c,d,A\n", DATASET_MMLU, TR_ERR_FORMAT, "quote inside unquoted field 1");
}

static dataset *load_shared(const char *rel, dataset_format fmt, int64_t first, int64_t end) {
    dataset *d = NULL;
    tr_status st = dataset_load(shared_path(rel), fmt, first, end, &d);
    if (st != TR_OK) fail_msg("%s: %s", rel, tr_last_error());
    return d;
}

static void test_shared_files(void **state) {
    (void)state;
    dataset *d = load_shared("data/tinystories/tinystories_val.txt", DATASET_TEXT, 0, -1);
    assert_int_equal(dataset_count(d), 1000);
    assert_int_equal(strncmp(dataset_get(d, 0)->target, "Spot. Spot saw the shiny car", 28), 0);
    const char *last = dataset_get(d, 999)->target;
    assert_string_equal(last + strlen(last) - 20, "special performance.");
    for (int64_t i = 0; i < 1000; i++) assert_null(strstr(dataset_get(d, i)->target, "<|endoftext|>"));
    dataset_free(d);
    d = load_shared("data/tinystories/tinystories_val.txt", DATASET_TEXT, 800, 1000);
    assert_int_equal(dataset_count(d), 200);
    assert_int_equal(dataset_get(d, 0)->index, 800);
    dataset_free(d);
    dataset *none = NULL;
    assert_int_equal(dataset_load(shared_path("data/tinystories/tinystories_val.txt"), DATASET_TEXT, 900, 1001,
                                  &none), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "1000 examples"));
    assert_int_equal(dataset_load(shared_path("data/no-such-file.txt"), DATASET_TEXT, 0, -1, &none), TR_ERR_IO);

    d = load_shared("data/commonsenseqa/dev_rand_split.jsonl", DATASET_CSQA, 0, -1);
    assert_int_equal(dataset_count(d), 1221);
    assert_string_equal(dataset_get(d, 0)->answer, "A");
    assert_string_equal(dataset_get(d, 0)->choices[4], "new york");
    assert_int_equal(dataset_get(d, 0)->n_choices, 5);
    dataset_free(d);
    d = load_shared("data/commonsenseqa/train_rand_split.jsonl", DATASET_CSQA, 9000, -1);
    assert_int_equal(dataset_count(d), 741);
    dataset_free(d);
    assert_int_equal(dataset_load(shared_path("data/commonsenseqa/test_rand_split_no_answers.jsonl"), DATASET_CSQA,
                                  0, 5, &none), TR_ERR_FORMAT);
    assert_non_null(strstr(tr_last_error(), "test_rand_split_no_answers.jsonl:1: no \"answerKey\""));

    d = load_shared("data/gsm8k/test.jsonl", DATASET_GSM8K, 0, -1);
    assert_int_equal(dataset_count(d), 1319);
    assert_string_equal(dataset_get(d, 0)->answer, "18");
    assert_true(dataset_check_answer(DATASET_GSM8K, dataset_get(d, 0), dataset_get(d, 0)->target));
    for (int64_t i = 0; i < dataset_count(d); i++)
        assert_true(dataset_check_answer(DATASET_GSM8K, dataset_get(d, i), dataset_get(d, i)->target));
    dataset_free(d);
    d = load_shared("data/gsm8k/train.jsonl", DATASET_GSM8K, 0, -1);
    assert_int_equal(dataset_count(d), 7473);
    dataset_free(d);

    d = load_shared("data/arc_challenge/arc_challenge.jsonl", DATASET_ARC, 0, -1);
    assert_int_equal(dataset_count(d), 1172);
    assert_string_equal(dataset_get(d, 0)->answer, "C"); /* gold 2 */
    assert_int_equal(strncmp(dataset_get(d, 0)->question, "Question: An astronomer observes", 32), 0);
    dataset_free(d);

    const char *mmlu[] = {"dev", "val", "test"};
    const int64_t rows[] = {5, 69, 612};
    for (int k = 0; k < 3; k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "data/mmlu_professional_psychology/professional_psychology_%s.csv", mmlu[k]);
        d = load_shared(rel, DATASET_MMLU, 0, -1);
        assert_int_equal(dataset_count(d), rows[k]);
        for (int64_t i = 0; i < dataset_count(d); i++) {
            const dataset_example *e = dataset_get(d, i);
            assert_int_equal(e->n_choices, 4);
            assert_true(dataset_check_answer(DATASET_MMLU, e, e->target));
        }
        if (k == 0) assert_string_equal(dataset_get(d, 0)->answer, "D");
        dataset_free(d);
    }
}

static void extract_is(dataset_format fmt, int32_t n_choices, const char *text, const char *want) {
    char buf[64];
    bool found = dataset_extract_answer(fmt, text, n_choices, buf, sizeof buf);
    if (strcmp(buf, want) != 0 || found != (want[0] != '\0'))
        fail_msg("extract(%s) = '%s' (found %d), want '%s'", text, buf, found, want);
}

static void test_extract_answer(void **state) {
    (void)state;
    extract_is(DATASET_CSQA, 5, "The answer is B.", "B");
    extract_is(DATASET_CSQA, 5, "so the ANSWER is (e)... the answer is (E) or", "E");
    extract_is(DATASET_CSQA, 5, "Answer: C", "C");
    extract_is(DATASET_CSQA, 5, "I think the answer is F, no, the answer is D", "D");
    extract_is(DATASET_ARC, 4, "E", "");
    extract_is(DATASET_ARC, 4, " D) grey", "D");
    extract_is(DATASET_ARC, 4, "(A) red", "A");
    extract_is(DATASET_ARC, 4, "A dog is red.", "");
    extract_is(DATASET_ARC, 4, "Because the sky is blue", "");
    extract_is(DATASET_MMLU, 4, "B", "B");
    extract_is(DATASET_MMLU, 4, "", "");
    extract_is(DATASET_GSM8K, 0, "So 3 + 4 = 7.\n#### 7", "7");
    extract_is(DATASET_GSM8K, 0, "#### $1,204.50", "1204.50");
    extract_is(DATASET_GSM8K, 0, "She has 3 apples, then 12. Total 15.", "15");
    extract_is(DATASET_GSM8K, 0, "It drops to -4 degrees", "-4");
    extract_is(DATASET_GSM8K, 0, "version2 of x3", "");
    extract_is(DATASET_GSM8K, 0, "no numbers", "");
    extract_is(DATASET_TEXT, 0, "The answer is A.", "");
    char tiny[1];
    assert_false(dataset_extract_answer(DATASET_CSQA, "A", 5, tiny, 1));
    assert_false(dataset_extract_answer(DATASET_CSQA, NULL, 5, tiny, 1));

    dataset_example ex = {0};
    ex.answer = "18";
    assert_true(dataset_check_answer(DATASET_GSM8K, &ex, "so 18.00"));
    assert_true(dataset_check_answer(DATASET_GSM8K, &ex, "#### 18"));
    assert_false(dataset_check_answer(DATASET_GSM8K, &ex, "#### 19"));
    ex.answer = "B";
    ex.n_choices = 4;
    assert_true(dataset_check_answer(DATASET_ARC, &ex, "The answer is B."));
    assert_false(dataset_check_answer(DATASET_ARC, &ex, "The answer is C."));
    assert_false(dataset_check_answer(DATASET_TEXT, &ex, "B"));
}

static char *detok(const tr_vocab *v, const int32_t *ids, int32_t n) {
    char *s = NULL;
    assert_int_equal(tr_detokenize(v, ids, n, false, true, &s), TR_OK);
    return s;
}

static void test_tokenize_examples(void **state) {
    (void)state;
    tr_vocab *v = NULL;
    assert_int_equal(tr_vocab_load(shared_path("models/stories-student.gguf"), &v), TR_OK);
    dataset *d = load_shared("data/tinystories/tinystories_val.txt", DATASET_TEXT, 0, 2);
    dataset_tokens t;
    assert_int_equal(dataset_tokenize(dataset_get(d, 0), DATASET_TEXT, v, TR_CHAT_CHATML, 0, &t), TR_OK);
    assert_int_equal(t.n_prompt, 1);
    assert_int_equal(t.ids[0], tr_vocab_bos(v));
    assert_true(t.n_ids > 50);
    char *s = detok(v, t.ids + 1, t.n_ids - 1);
    assert_string_equal(s + 1, dataset_get(d, 0)->target); /* SentencePiece's dummy prefix space */
    free(s);
    dataset_tokens_free(&t);
    assert_int_equal(dataset_tokenize(dataset_get(d, 1), DATASET_TEXT, v, TR_CHAT_NONE, 16, &t), TR_OK);
    assert_int_equal(t.n_ids, 17);
    dataset_tokens_free(&t);
    assert_null(t.ids);
    dataset_free(d);

    /* Plain prompt: the target follows "Answer:" after a space. */
    d = load_shared("data/arc_challenge/arc_challenge.jsonl", DATASET_ARC, 0, 1);
    assert_int_equal(dataset_tokenize(dataset_get(d, 0), DATASET_ARC, v, TR_CHAT_NONE, 0, &t), TR_OK);
    s = detok(v, t.ids + t.n_prompt, t.n_ids - t.n_prompt);
    assert_string_equal(s, " The answer is C.");
    free(s);
    s = detok(v, t.ids + 1, t.n_prompt - 1);
    assert_int_equal(strncmp(s, " Question: An astronomer", 24), 0);
    assert_non_null(strstr(s, "\nAnswer:"));
    free(s);
    dataset_tokens_free(&t);
    tr_vocab_free(v);

    /* Chat template: the question is the user's turn, the target the assistant's reply up to its end marker. */
    assert_int_equal(tr_vocab_load(shared_path("tokenizer/ggml-vocab-llama-spm.gguf"), &v), TR_OK);
    assert_int_equal(dataset_tokenize(dataset_get(d, 0), DATASET_ARC, v, TR_CHAT_LLAMA2, 0, &t), TR_OK);
    s = detok(v, t.ids, t.n_prompt);
    assert_non_null(strstr(s, "[INST]"));
    assert_non_null(strstr(s, "[/INST]"));
    assert_null(strstr(s, "The answer is"));
    free(s);
    s = detok(v, t.ids + t.n_prompt, t.n_ids - t.n_prompt);
    assert_non_null(strstr(s, "The answer is C."));
    free(s);
    dataset_tokens_free(&t);
    dataset_free(d);
    tr_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_ranges),
        cmocka_unit_test(test_text_stories),
        cmocka_unit_test(test_csqa),
        cmocka_unit_test(test_arc_gsm8k_mmlu),
        cmocka_unit_test(test_shared_files),
        cmocka_unit_test(test_extract_answer),
        cmocka_unit_test(test_tokenize_examples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
