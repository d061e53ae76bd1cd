/* Fuzz harness of the OpenAI request handling past the HTTP layer (gateway/api): one request body, as a
 * client would POST it, through everything the gateway does before a worker is involved. Shared by the
 * libFuzzer entry point (fuzz_api.c) and the deterministic replay test (test_api_fuzz_replay.c). A broken
 * invariant aborts with a message (that is how a fuzzer reports); the product code itself never aborts. */
#ifndef API_FUZZ_H
#define API_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/** Run body through /v1/chat/completions, /v1/completions and /tokenize (model named or defaulted): JSON
 * parse, parameters, message checks and media collection, data: URL decoding, the M3 chat template, the
 * prompt ids with a real (demo-shaped) tokenizer and the choices' parsers. Invariants: a refusal is a 4xx (or
 * a documented 503) with a one-line message and a `param` when a field is at fault; an accepted body has its
 * parameters, media and prompt ids inside their documented bounds. Leaks are the sanitizer's to find. */
void api_fuzz_body(const uint8_t *data, size_t size);

#endif
