/* The route table, the mm_status -> HTTP table, reason phrases and the OpenAI error JSON. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gw_http_internal.h"
#include "mmgw_test.h"

static void h_a(struct gw_request *req, void *ud) {}

static void h_b(struct gw_request *req, void *ud) {}

static void test_routes(void)
{
    struct gw_routes *rt = gw_routes_create();
    struct mm_err err;
    int tag_get, tag_post, tag_prefix, tag_long, tag_any;
    CHECK(gw_routes_add(rt, "GET", "/v1/models", GW_ROUTE_EXACT, h_a, &tag_get, false, &err) == MM_OK);
    CHECK(gw_routes_add(rt, "POST", "/v1/chat/completions", GW_ROUTE_EXACT, h_a, &tag_post, false, &err) ==
          MM_OK);
    CHECK(gw_routes_add(rt, "GET", "/static/", GW_ROUTE_PREFIX, h_a, &tag_prefix, false, &err) == MM_OK);
    CHECK(gw_routes_add(rt, "GET", "/static/img/", GW_ROUTE_PREFIX, h_a, &tag_long, false, &err) == MM_OK);
    CHECK(gw_routes_add(rt, NULL, "/any", GW_ROUTE_EXACT, h_a, &tag_any, false, &err) == MM_OK);
    /* duplicates are refused unless replacing; bad input is refused */
    CHECK(gw_routes_add(rt, "GET", "/v1/models", GW_ROUTE_EXACT, h_b, NULL, false, &err) == MM_INVALID);
    CHECK(strstr(err.msg, "already registered") != NULL);
    CHECK(gw_routes_add(rt, "GET", "/v1/models", GW_ROUTE_EXACT, h_b, &tag_get, true, &err) == MM_OK);
    CHECK(gw_routes_add(rt, "GET", "nope", GW_ROUTE_EXACT, h_b, NULL, false, &err) == MM_INVALID);
    CHECK(gw_routes_add(rt, "get", "/x", GW_ROUTE_EXACT, h_b, NULL, false, &err) == MM_INVALID);
    CHECK(gw_routes_add(rt, "GET", "/x", GW_ROUTE_EXACT, NULL, NULL, false, &err) == MM_INVALID);
    CHECK(gw_routes_has(rt, "GET", "/v1/models") && !gw_routes_has(rt, "POST", "/v1/models"));

    int status = 0;
    char allow[64];
    const struct gw_route *r = gw_routes_match(rt, "GET", "/v1/models", &status, allow, sizeof allow);
    CHECK(r && r->ud == &tag_get && r->fn == h_b);
    r = gw_routes_match(rt, "HEAD", "/v1/models", &status, allow, sizeof allow); /* HEAD uses GET */
    CHECK(r && r->ud == &tag_get);
    r = gw_routes_match(rt, "POST", "/v1/models", &status, allow, sizeof allow);
    CHECK(!r && status == 405 && strcmp(allow, "GET") == 0);
    r = gw_routes_match(rt, "GET", "/v1/chat/completions", &status, allow, sizeof allow);
    CHECK(!r && status == 405 && strcmp(allow, "POST") == 0);
    r = gw_routes_match(rt, "GET", "/v1/models/x", &status, allow, sizeof allow);
    CHECK(!r && status == 404);
    r = gw_routes_match(rt, "GET", "/static/img/a.png", &status, allow, sizeof allow);
    CHECK(r && r->ud == &tag_long); /* the longest prefix */
    r = gw_routes_match(rt, "GET", "/static/css", &status, allow, sizeof allow);
    CHECK(r && r->ud == &tag_prefix);
    r = gw_routes_match(rt, "DELETE", "/any", &status, allow, sizeof allow);
    CHECK(r && r->ud == &tag_any);
    gw_routes_free(rt);
}

static void test_status_map(void)
{
    CHECK_EQ_INT(gw_http_status_from_mm(MM_OK), 200);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_INVALID), 400);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_FORMAT), 400);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_DENIED), 400);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_UNSUPPORTED), 400);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_NOT_FOUND), 404);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_TOO_LARGE), 413);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_EXHAUSTED), 429);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_UNAVAILABLE), 503);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_AGAIN), 503);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_TIMEOUT), 504);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_IO), 502);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_ERROR), 500);
    CHECK_EQ_INT(gw_http_status_from_mm(MM_ABI), 500);
    CHECK_EQ_INT(gw_http_status_from_mm(-999), 500);
    CHECK_STR(gw_http_reason(404), "Not Found");
    CHECK_STR(gw_http_reason(413), "Payload Too Large");
    CHECK_STR(gw_http_reason(799), "Unknown");
}

static void test_error_json(void)
{
    char *s = gw_http_error_json(404, NULL, "model \"x\" not found", "model", "model_not_found");
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    CHECK(j != NULL);
    json_t *e = json_object_get(j, "error");
    CHECK(json_is_object(e) && json_object_size(j) == 1);
    CHECK_STR(json_string_value(json_object_get(e, "message")), "model \"x\" not found");
    CHECK_STR(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    CHECK_STR(json_string_value(json_object_get(e, "param")), "model");
    CHECK_STR(json_string_value(json_object_get(e, "code")), "model_not_found");
    json_decref(j);
    free(s);
    static const struct {
        int status;
        const char *type;
    } types[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
                 {413, "invalid_request_error"}, {429, "rate_limit_error"},     {500, "server_error"},
                 {503, "server_error"}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        s = gw_http_error_json(types[i].status, NULL, NULL, NULL, NULL);
        j = json_loads(s, 0, &je);
        e = json_object_get(j, "error");
        CHECK_STR(json_string_value(json_object_get(e, "type")), types[i].type);
        CHECK_STR(json_string_value(json_object_get(e, "message")), gw_http_reason(types[i].status));
        CHECK(json_is_null(json_object_get(e, "param")) && json_is_null(json_object_get(e, "code")));
        json_decref(j);
        free(s);
    }
    /* invalid UTF-8 in a message (it may quote the client) becomes U+FFFD, and the JSON stays valid */
    s = gw_http_error_json(400, "x", "bad \xff\xfe byte, overlong \xc0\xaf, cut \xe2\x82", NULL, NULL);
    j = json_loads(s, 0, &je);
    CHECK(j != NULL);
    if (j) {
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        CHECK_STR(m, "bad \xef\xbf\xbd\xef\xbf\xbd byte, overlong \xef\xbf\xbd\xef\xbf\xbd, cut "
                     "\xef\xbf\xbd\xef\xbf\xbd");
        json_decref(j);
    }
    free(s);
    s = gw_http_error_json(400, NULL, "caf\xc3\xa9 \xf0\x9f\x98\x80 ok", NULL, NULL);
    CHECK(strstr(s, "caf\xc3\xa9 \xf0\x9f\x98\x80 ok") != NULL);
    free(s);
}

int main(void)
{
    test_routes();
    test_status_map();
    test_error_json();
    return test_done();
}
