/* families.c — the one table of model families the engine knows (arch.h): a new family is its file under
 * src/model/ and its line here. */
#include <stdio.h>
#include <string.h>

#include "model/arch.h"

extern const arch_ops arch_llama, arch_qwen2, arch_qwen3, arch_qwen35, arch_gemma3, arch_smollm3,
    arch_lfm2, arch_gemma4;

static const arch_ops *const families[] = {
    &arch_llama, &arch_qwen2, &arch_qwen3, &arch_qwen35, &arch_gemma3, &arch_smollm3, &arch_lfm2, &arch_gemma4,
};

#define N_FAMILIES (sizeof families / sizeof families[0])

const arch_ops *arch_find(const char *name) {
    for (size_t i = 0; name && i < N_FAMILIES; i++)
        if (strcmp(families[i]->name, name) == 0) return families[i];
    return NULL;
}

void arch_names(char *out, size_t cap) {
    out[0] = '\0';
    for (size_t i = 0; i < N_FAMILIES; i++) {
        const size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", i ? ", " : "", families[i]->name);
    }
}

const arch_ops *const *arch_all(size_t *n) {
    *n = N_FAMILIES;
    return families;
}
