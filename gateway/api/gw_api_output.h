/* One choice's output and the response JSON (gw_api_output.c); used by gw_api_generate.c. */
#ifndef GW_API_OUTPUT_H
#define GW_API_OUTPUT_H

#include "gw_api_internal.h"

/** Create r->p.n choices (detokenizer, stop matcher, the plugin's parser for chats). 0 or -1 with e. */
int gw_api_choices_init(struct gw_api_req *r, struct gw_api_error *e);
/** One generated token of choice c (lp and top may be NULL). 0, or -1 when out of memory or the parser
 * failed. */
int gw_api_choice_token(struct gw_api_req *r, struct gw_api_choice *c, uint32_t id, const float *lp,
                        const Mmgw__Worker__V1__TopLogprobs *top);
/** The choice ended ("stop", "length", "abort"): flush everything held back. A stop string found in the
 * held text turns the reason into "stop"; tool calls turn "stop" into "tool_calls". */
int gw_api_choice_finish(struct gw_api_req *r, struct gw_api_choice *c, const char *reason);
/** r->prefix: the response JSON up to "choices":[ (after r->id, r->created are set). */
int gw_api_write_prefix(struct gw_api_req *r);
/** Append one SSE chunk with c's pending delta (and its finish_reason once), if there is anything. */
int gw_api_chunk_write(struct gw_api_req *r, struct gw_api_choice *c, struct mm_buf *out);
/** Append the usage chunk (choices: []). */
int gw_api_usage_chunk(struct gw_api_req *r, struct mm_buf *out);
/** The non-streaming response body. */
int gw_api_full_response(struct gw_api_req *r, struct mm_buf *b);

#endif
