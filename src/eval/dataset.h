/* dataset.h — the evaluation and training datasets of ../shared/data, read into examples with a prompt, a target
 * text and a gold answer (internal to the library; `tokroute collect` and `tokroute eval` share it).
 *
 * Formats (see ../shared/data/README.md) and the templates built from them:
 *   text   stories separated by lines "<|endoftext|>"; each story is trimmed of surrounding white space.
 *          question = prompt = "", target = the story, answer = "" (language modelling: no task answer).
 *   csqa   CommonsenseQA jsonl {answerKey, question:{stem, choices:[{label, text}]}}
 *   arc    ARC-Challenge jsonl {query: "Question: ...", choices: [strings], gold: index}
 *   mmlu   MMLU CSV without header: question, A, B, C, D, answer letter (RFC 4180 quoting)
 *          question = "Question: {q}\nA. {c0}\nB. {c1}\n...\nAnswer with the letter of the correct choice."
 *          target   = "The answer is {L}."            answer = "{L}"
 *   gsm8k  {question, answer}; the final answer follows "#### ".
 *          question = "Question: {q}\nSolve it step by step and end with \"#### \" and the final number."
 *          target   = the reference solution as given, answer = the number after "#### " (commas removed)
 *   prompt (used when the model has no chat template) = question + "\nAnswer:"; the text the model sees is then
 *   prompt + " " + target. With a chat template the question is the user's message and the target the assistant's
 *   reply (dataset_tokenize). Text stories use neither: BOS + story.
 *
 * Examples are selected by index range [first, end) over the examples of the file, counted from 0 (for jsonl and
 * CSV, non-blank lines/records; for text, non-empty stories). Only the selected ones are parsed fully; a malformed
 * one fails with its line number. These names are stable: the collect/train side builds on them. */
#ifndef TR_EVAL_DATASET_H
#define TR_EVAL_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

typedef enum dataset_format { DATASET_TEXT = 0, DATASET_CSQA, DATASET_GSM8K, DATASET_ARC, DATASET_MMLU } dataset_format;

enum { DATASET_MAX_CHOICES = 8 };

typedef struct dataset_example {
    int64_t index;        /* index in the file (first + i) */
    int64_t line;         /* 1-based line where it starts */
    char *question;       /* the user's message ("" for text) */
    char *prompt;         /* the plain prompt: question + "\nAnswer:" ("" for text) */
    char *target;         /* the reference continuation (story, solution, "The answer is B.") */
    char *answer;         /* the gold answer: a letter, a number, or "" for text */
    int32_t n_choices;    /* 0 for text and gsm8k */
    char *choices[DATASET_MAX_CHOICES];
} dataset_example;

typedef struct dataset dataset;

/* "text", "csqa", "gsm8k", "arc", "mmlu" (also "commonsenseqa", "arc_challenge"); TR_ERR_ARG for others. */
tr_status dataset_format_from_name(const char *name, dataset_format *out);
const char *dataset_format_name(dataset_format fmt);
/* True for the formats with a task answer (all but text). */
bool dataset_format_has_answer(dataset_format fmt);

/* "A:B", "A:" (to the end), ":B", or "A" (that one example) → [first, end) with end = -1 meaning the end. */
tr_status dataset_parse_range(const char *text, int64_t *first, int64_t *end);

/* Reads examples [first, end) of a file (end = -1: to the end). A range reaching past the last example is
 * TR_ERR_RANGE (with the file's count in the message); first > end is TR_ERR_ARG. */
tr_status dataset_load(const char *path, dataset_format fmt, int64_t first, int64_t end, dataset **out);
/* The same over a buffer (need not be NUL-terminated); name is used in messages. */
tr_status dataset_parse(const char *data, size_t size, const char *name, dataset_format fmt, int64_t first,
                        int64_t end, dataset **out);
void dataset_free(dataset *d);

dataset_format dataset_get_format(const dataset *d);
int64_t dataset_count(const dataset *d);
/* NULL when i is out of range. */
const dataset_example *dataset_get(const dataset *d, int64_t i);

/* The token sequence of one example: ids[0, n_prompt) is the prompt (BOS included as the vocabulary asks) and
 * ids[n_prompt, n_ids) the target. Prompt and target are tokenized together, so the target's ids are the ones a
 * model sees after the prompt; the boundary is the longest common prefix of the prompt's own tokenization and the
 * whole (so a token straddling the boundary belongs to the target). tmpl != TR_CHAT_NONE renders the question as a
 * user turn and the target as the assistant's reply (the end-of-turn marker belongs to the target); text stories
 * ignore tmpl. max_target > 0 keeps at most that many target ids. */
typedef struct dataset_tokens {
    int32_t *ids;
    int32_t n_ids, n_prompt;
} dataset_tokens;
tr_status dataset_tokenize(const dataset_example *ex, dataset_format fmt, const tr_vocab *vocab,
                           tr_chat_template tmpl, int32_t max_target, dataset_tokens *out);
void dataset_tokens_free(dataset_tokens *t);

/* The answer a generated text gives, written to buf (NUL-terminated; "" when none is found). Letters
 * (csqa/arc/mmlu): "answer is X" / "answer: X" (optionally "(X)"), else a letter at the start ("B", "(B)", "B."),
 * only letters among the first n_choices. gsm8k: the number after "####", else the last number in the text, with
 * commas, "$" and a trailing "." removed. Text: always "". Returns true when an answer was found. */
bool dataset_extract_answer(dataset_format fmt, const char *generated, int32_t n_choices, char *buf, size_t cap);
/* Whether the generated text's extracted answer equals the example's gold answer (numbers compared as numbers). */
bool dataset_check_answer(dataset_format fmt, const dataset_example *ex, const char *generated);

#endif /* TR_EVAL_DATASET_H */
