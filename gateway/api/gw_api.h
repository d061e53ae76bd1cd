/* The OpenAI-compatible API of mmgw, as a gateway module (gateway/server/gw_module.h).
 *
 * Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, POST /tokenize,
 * POST /detokenize, GET /health/models (per-model worker health; GET /health stays the server's).
 * Every `model NAME { }` block of the configuration becomes a model clients name in "model".
 * See docs/design/api.md. */
#ifndef GW_API_H
#define GW_API_H

#include "gw_module.h"

extern const struct gw_module gw_api_module;

#endif
