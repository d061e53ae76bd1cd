/* mmgw-mkdemo --out DIR [--tokenizer tokenizer.json] [--seed N] [--set name=value]...
 * Writes a random-weight tiny MiniMax-M3 checkpoint (config.json + model.safetensors, bf16) into DIR. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mkdemo.h"

static void usage(void)
{
    fprintf(
        stderr,
        "usage: mmgw-mkdemo --out DIR [--tokenizer tokenizer.json] [--seed N] [--set name=value]...\n"
        "  sizes for --set: vocab hidden layers heads kv_heads head_dim rot_dim inter dense_inter\n"
        "  shared_inter experts topk_experts idx_heads idx_dim block topk_blocks local_blocks\n"
        "  attn_pattern (d/s per layer) mlp_pattern (d/m per layer) routed_scale image_token video_token\n"
        "  eos_token no_vision vis_hidden vis_inter vis_layers vis_heads patch temporal merge proj_hidden\n"
        "  dtype (BF16|F16|F32)\n");
}

int main(int argc, char **argv)
{
    struct mk_demo_opts o;
    mk_demo_defaults(&o);
    const char *out = NULL, *tok = NULL;
    struct mm_err err = {0};
    /* the tokenizer decides the vocabulary first, so --set can still override it */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--tokenizer")) tok = argv[i + 1];
    if (tok && mk_demo_use_tokenizer(&o, tok, &err)) {
        fprintf(stderr, "mmgw-mkdemo: %s\n", err.msg);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (!v) {
            usage();
            return 2;
        }
        i++;
        if (!strcmp(a, "--out")) {
            out = v;
        } else if (!strcmp(a, "--tokenizer")) {
            continue;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || *end || end == v) {
                fprintf(stderr, "mmgw-mkdemo: bad seed '%s'\n", v);
                return 2;
            }
            o.seed = s;
        } else if (!strcmp(a, "--set")) {
            if (mk_demo_set(&o, v, &err)) {
                fprintf(stderr, "mmgw-mkdemo: %s\n", err.msg);
                return 2;
            }
        } else {
            usage();
            return 2;
        }
    }
    if (!out) {
        usage();
        return 2;
    }
    if (mkdir(out, 0755) && errno != EEXIST) {
        fprintf(stderr, "mmgw-mkdemo: %s: %s\n", out, strerror(errno));
        return 1;
    }
    if (mk_demo_write(out, &o, &err)) {
        fprintf(stderr, "mmgw-mkdemo: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "mmgw-mkdemo: wrote %s (vocab %d, image %d, video %d, seed %llu)\n", out, o.vocab,
            o.image_token, o.video_token, (unsigned long long)o.seed);
    return 0;
}
