/* Request fields shared by the generation endpoints: sampling, stop conditions, streaming, logprobs.
 * Every refusal is a 400 that names the parameter, as OpenAI's errors do. Fields the worker protocol
 * cannot honour (penalties, logit_bias, structured output) are refused rather than silently ignored. */
#include <math.h>
#include <string.h>

#include "gw_api_internal.h"

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* Absent and null leave *out unchanged (OpenAI treats null as "not given"). */
static int get_bool(json_t *o, const char *k, bool *out, struct gw_api_error *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return gw_api_fail(e, 400, k, "'%s' must be a boolean, not %s", k, type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int get_num(json_t *o, const char *k, double lo, double hi, bool *has, double *out,
                   struct gw_api_error *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return gw_api_fail(e, 400, k, "'%s' must be a number, not %s", k, type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return gw_api_fail(e, 400, k, "'%s' must be between %g and %g, got %g", k, lo, hi, d);
    *out = d;
    if (has) *has = true;
    return 0;
}

static int get_int(json_t *o, const char *k, int64_t lo, int64_t hi, bool *has, int64_t *out,
                   struct gw_api_error *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v))
        return gw_api_fail(e, 400, k, "'%s' must be an integer, not %s", k, type_name(v));
    json_int_t d = json_integer_value(v);
    if (d < lo || d > hi)
        return gw_api_fail(e, 400, k, "'%s' must be between %lld and %lld, got %lld", k, (long long)lo,
                           (long long)hi, (long long)d);
    *out = d;
    if (has) *has = true;
    return 0;
}

/* A field we cannot honour: fine when absent, null or at its neutral value. */
static int refuse_unless_neutral(json_t *o, const char *k, double neutral, struct gw_api_error *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return gw_api_fail(e, 400, k, "'%s' must be a number, not %s", k, type_name(v));
    if (json_number_value(v) != neutral)
        return gw_api_fail(e, 400, k, "'%s' is not supported by this server (only %g)", k, neutral);
    return 0;
}

static int parse_stop(json_t *body, struct gw_api_params *p, struct gw_api_error *e)
{
    json_t *v = json_object_get(body, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > GW_API_MAX_STOP_STRS)
            return gw_api_fail(e, 400, "stop", "'stop' has %zu strings, at most %d are allowed", n,
                               GW_API_MAX_STOP_STRS);
        items = NULL;
    } else if (!json_is_string(v)) {
        return gw_api_fail(e, 400, "stop", "'stop' must be a string or an array of strings, not %s",
                           type_name(v));
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s))
            return gw_api_fail(e, 400, "stop", "'stop[%zu]' must be a string, not %s", i, type_name(s));
        size_t len = json_string_length(s);
        if (len == 0) continue; /* an empty stop string would match everywhere: vLLM drops it too */
        if (len > GW_API_MAX_STOP_LEN)
            return gw_api_fail(e, 400, "stop", "'stop[%zu]' is longer than %d bytes", i, GW_API_MAX_STOP_LEN);
        p->stop[p->n_stop] = json_string_value(s);
        p->stop_len[p->n_stop++] = len;
    }
    return 0;
}

static int parse_stop_ids(json_t *body, uint32_t vocab, struct gw_api_params *p, struct gw_api_error *e)
{
    json_t *v = json_object_get(body, "stop_token_ids");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v))
        return gw_api_fail(e, 400, "stop_token_ids", "'stop_token_ids' must be an array of integers, not %s",
                           type_name(v));
    if (json_array_size(v) > GW_API_MAX_STOP_IDS / 2)
        return gw_api_fail(e, 400, "stop_token_ids", "'stop_token_ids' has more than %d ids",
                           GW_API_MAX_STOP_IDS / 2);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= (json_int_t)vocab)
            return gw_api_fail(e, 400, "stop_token_ids", "'stop_token_ids[%zu]' must be a token id below %u",
                               i, vocab);
        p->stop_ids[p->n_stop_ids++] = (uint32_t)json_integer_value(x);
    }
    return 0;
}

static int parse_tool_choice(json_t *body, struct gw_api_error *e)
{
    json_t *v = json_object_get(body, "tool_choice");
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "auto") == 0 || strcmp(s, "none") == 0) return 0;
        if (strcmp(s, "required") == 0)
            return gw_api_fail(
                e, 400, "tool_choice",
                "'tool_choice' \"required\" needs constrained decoding, which this server does not do; "
                "use \"auto\"");
        return gw_api_fail(e, 400, "tool_choice", "'tool_choice' must be \"none\", \"auto\" or \"required\"");
    }
    if (json_is_object(v))
        return gw_api_fail(
            e, 400, "tool_choice",
            "'tool_choice' naming a function needs constrained decoding, which this server does not do; "
            "use \"auto\"");
    return gw_api_fail(e, 400, "tool_choice", "'tool_choice' must be a string or an object, not %s",
                       type_name(v));
}

int gw_api_params_parse(json_t *body, enum gw_api_kind kind, uint32_t vocab, struct gw_api_params *p,
                        struct gw_api_error *e)
{
    memset(p, 0, sizeof *p);
    p->max_tokens = -1;
    p->min_tokens = -1;
    p->n = 1;
    p->add_generation_prompt = true;
    p->skip_special = true;
    int64_t n = 1;
    if (get_bool(body, "stream", &p->stream, e)) return -1;
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return gw_api_fail(e, 400, "stream_options", "'stream_options' must be an object, not %s",
                               type_name(so));
        if (!p->stream)
            return gw_api_fail(e, 400, "stream_options",
                               "'stream_options' is only allowed when 'stream' is true");
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu))
            return gw_api_fail(e, 400, "stream_options.include_usage",
                               "'stream_options.include_usage' must be a boolean");
        p->include_usage = json_is_true(iu);
    }
    int64_t mt = -1, mct = -1;
    if (get_int(body, "max_tokens", 1, INT32_MAX, NULL, &mt, e)) return -1;
    if (kind == GW_API_CHAT && get_int(body, "max_completion_tokens", 1, INT32_MAX, NULL, &mct, e)) return -1;
    p->max_tokens = mct > 0 ? mct : mt;
    if (get_int(body, "min_tokens", 0, INT32_MAX, NULL, &p->min_tokens, e)) return -1;
    if (p->max_tokens > 0 && p->min_tokens > p->max_tokens) /* as vLLM: a contradiction, not a clamp */
        return gw_api_fail(e, 400, "min_tokens", "'min_tokens' (%lld) must not exceed '%s' (%lld)",
                           (long long)p->min_tokens, mct > 0 ? "max_completion_tokens" : "max_tokens",
                           (long long)p->max_tokens);
    if (get_num(body, "temperature", 0, 2, &p->has_temperature, &p->temperature, e)) return -1;
    if (get_num(body, "top_p", 0, 1, &p->has_top_p, &p->top_p, e)) return -1;
    if (p->has_top_p && p->top_p <= 0) return gw_api_fail(e, 400, "top_p", "'top_p' must be greater than 0");
    if (get_int(body, "top_k", -1, INT32_MAX, &p->has_top_k, &p->top_k, e)) return -1;
    if (p->has_top_k && p->top_k <= 0) p->has_top_k = false; /* -1 and 0 mean "off", as in vLLM */
    if (get_num(body, "min_p", 0, 1, &p->has_min_p, &p->min_p, e)) return -1;
    json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed))
            return gw_api_fail(e, 400, "seed", "'seed' must be an integer, not %s", type_name(seed));
        p->seed = (uint64_t)json_integer_value(seed);
        p->has_seed = true;
    }
    if (get_int(body, "n", 1, GW_API_MAX_N, NULL, &n, e)) return -1;
    p->n = (uint32_t)n;
    if (kind == GW_API_CHAT) {
        if (get_bool(body, "logprobs", &p->logprobs, e)) return -1;
        int64_t tl = 0;
        bool has_tl = false;
        if (get_int(body, "top_logprobs", 0, GW_API_MAX_TOP_LOGPROBS, &has_tl, &tl, e)) return -1;
        if (has_tl && !p->logprobs && tl > 0)
            return gw_api_fail(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
        p->top_logprobs = (int)tl;
    } else {
        int64_t lp = 0;
        if (get_int(body, "logprobs", 0, GW_API_MAX_TOP_LOGPROBS, &p->logprobs, &lp, e)) return -1;
        p->top_logprobs = (int)lp;
        bool echo = false;
        if (get_bool(body, "echo", &echo, e)) return -1;
        if (echo) return gw_api_fail(e, 400, "echo", "'echo' is not supported by this server");
        json_t *suffix = json_object_get(body, "suffix");
        if (suffix && !json_is_null(suffix))
            return gw_api_fail(e, 400, "suffix", "'suffix' is not supported by this server");
        int64_t best_of = n;
        if (get_int(body, "best_of", 1, GW_API_MAX_N, NULL, &best_of, e)) return -1;
        if (best_of != n) return gw_api_fail(e, 400, "best_of", "'best_of' must equal 'n' on this server");
    }
    if (get_bool(body, "ignore_eos", &p->ignore_eos, e)) return -1;
    if (get_bool(body, "return_tokens_as_token_ids", &p->tokens_as_ids, e)) return -1;
    /* vLLM's detokenization fields. spaces_between_special_tokens only changes slow (Python) tokenizers'
     * output: a tokenizer.json decodes the same either way (HF fast decode, vLLM's fast detokenizer). */
    bool spaces = true;
    if (get_bool(body, "skip_special_tokens", &p->skip_special, e) ||
        get_bool(body, "spaces_between_special_tokens", &spaces, e))
        return -1;
    if (parse_stop(body, p, e) || parse_stop_ids(body, vocab, p, e)) return -1;
    json_t *user = json_object_get(body, "user");
    if (user && !json_is_null(user) && !json_is_string(user))
        return gw_api_fail(e, 400, "user", "'user' must be a string, not %s", type_name(user));
    if (refuse_unless_neutral(body, "frequency_penalty", 0, e) ||
        refuse_unless_neutral(body, "presence_penalty", 0, e) ||
        refuse_unless_neutral(body, "repetition_penalty", 1, e))
        return -1;
    json_t *lb = json_object_get(body, "logit_bias");
    if (lb && !json_is_null(lb) && !(json_is_object(lb) && json_object_size(lb) == 0))
        return gw_api_fail(e, 400, "logit_bias", "'logit_bias' is not supported by this server");
    json_t *rf = json_object_get(body, "response_format");
    if (rf && !json_is_null(rf)) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
            return gw_api_fail(
                e, 400, "response_format",
                "'response_format' other than {\"type\": \"text\"} needs constrained decoding, which this "
                "server does not do");
    }
    if (kind == GW_API_CHAT) {
        json_t *tools = json_object_get(body, "tools");
        if (tools && !json_is_null(tools)) {
            if (!json_is_array(tools))
                return gw_api_fail(e, 400, "tools", "'tools' must be an array, not %s", type_name(tools));
            p->has_tools = json_array_size(tools) > 0;
        }
        if (parse_tool_choice(body, e)) return -1;
        json_t *k = json_object_get(body, "chat_template_kwargs");
        if (k && !json_is_null(k) && !json_is_object(k))
            return gw_api_fail(e, 400, "chat_template_kwargs",
                               "'chat_template_kwargs' must be an object, not %s", type_name(k));
        if (get_bool(body, "add_generation_prompt", &p->add_generation_prompt, e)) return -1;
    }
    return 0;
}
