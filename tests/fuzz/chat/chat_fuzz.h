/* Fuzz harness of the M3 chat half: one function per target, shared by the libFuzzer entry points and by
 * the deterministic replay test. Each checks invariants and aborts with a message when one breaks (that is
 * how a fuzzer reports); the product code itself never aborts. */
#ifndef CHAT_FUZZ_H
#define CHAT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/** Render bytes as a chat request: no crash or leak; on success the prompt starts with the system block
 * and the media list fits; on failure nothing was written. */
void chat_fuzz_render(const uint8_t *data, size_t size);

/** data[0] picks the options (thinking enabled, prompt opened reasoning, chunk seed); the rest is model
 * output. Parsed whole, in random chunks and byte by byte, the events must agree, come in protocol order,
 * and every tool call's arguments must be one JSON object. */
void chat_fuzz_output(const uint8_t *data, size_t size);

#endif
