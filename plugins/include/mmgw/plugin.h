/* mmgw model plugin ABI — the only header a plugin includes.
 *
 * A plugin is a shared object exporting exactly one symbol, mmgw_plugin_entry, which returns a pointer
 * to a static, immutable `struct mmgw_plugin`. Everything model-specific lives behind it: vision
 * constants and rules (resize, frame sampling, patch layout), prompt rules (chat template, media
 * placeholder expansion, special/stop tokens) and output parsing (reasoning, tool calls).
 *
 * Compatibility rules (see plugins/ABI_CHANGES.md):
 *  - abi_major changes only on incompatible change; the loader refuses a plugin whose major differs.
 *  - abi_minor grows when members are appended; struct_size tells the host which members exist.
 *    Members are only ever appended, never removed, reordered or retyped.
 *  - Only fixed-width integers, float/double, (pointer, length) pairs, opaque handles and the structs
 *    below cross the boundary. Enums travel as int32_t. No libc, libvips, FFmpeg or JSON-library types.
 *  - Every function returns 0 (MMGW_OK) or a negative MMGW_E* code; on error it fills the error buffer
 *    given to it through host->set_error (one line of text).
 *
 * Ownership: memory the host passes in stays the host's and is valid for the call only, unless a
 * member says otherwise. Memory a plugin returns is either static (lives as long as the plugin is
 * loaded) or written into host-provided sinks (struct mmgw_sink, callbacks). A plugin never frees host
 * memory and allocates only through host->alloc / host->free.
 * A plugin that parses the request with the jansson the host process loads (as the built-in ones do) must
 * drop every JSON value it made during render_chat before returning, and those made during parser_create
 * by parser_destroy: the host (mmgw) may serve jansson's allocations during those calls from the request's
 * memory, which goes with the request.
 *
 * Threading: instance functions may be called from several threads at once with different instances,
 * and from several threads with the same instance for the functions marked "const"; stream handles
 * (struct mmgw_output_parser) are used by one thread at a time.
 */
#ifndef MMGW_PLUGIN_H
#define MMGW_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MMGW_PLUGIN_ABI_MAJOR 1
#define MMGW_PLUGIN_ABI_MINOR 1
#define MMGW_PLUGIN_ENTRY_SYMBOL "mmgw_plugin_entry"

#if defined(__GNUC__)
#define MMGW_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define MMGW_PLUGIN_EXPORT
#endif

/* Return codes (a subset of the host's status codes, same numbers). */
enum mmgw_plugin_status {
    MMGW_OK = 0,
    MMGW_E_ERROR = -1,       /* a bug */
    MMGW_E_NOMEM = -2,       /* allocation failed */
    MMGW_E_INVALID = -3,     /* the request is malformed (400) */
    MMGW_E_UNSUPPORTED = -6, /* the plugin cannot do this (400) */
    MMGW_E_TOO_LARGE = -8    /* over a size or pixel budget (400/413) */
};

enum mmgw_log_level { MMGW_LOG_ERROR = 0, MMGW_LOG_WARN = 1, MMGW_LOG_INFO = 2, MMGW_LOG_DEBUG = 3 };
enum mmgw_media_kind { MMGW_MEDIA_IMAGE = 0, MMGW_MEDIA_VIDEO = 1 };
enum mmgw_resample { MMGW_RESAMPLE_BICUBIC = 0, MMGW_RESAMPLE_BILINEAR = 1 };

/** An error sink: the host owns it; plugins fill it with host->set_error. */
struct mmgw_error;

/** Services the host lends to plugins. Passed to mmgw_plugin_entry and to create(); lives until the
 * plugin is unloaded. A plugin checks struct_size (or a member for NULL) before using a member that a
 * later minor version appended. */
struct mmgw_host_api {
    uint32_t struct_size;
    uint32_t abi_major, abi_minor;
    /** Heap memory; free(NULL) is fine. alloc returns NULL on failure. */
    void *(*alloc)(uint64_t size);
    void (*free)(void *p);
    /** One log line; msg need not end in a newline. */
    void (*log)(int32_t level, const char *plugin_name, const char *msg);
    /** Record an error message (printf-style) in err; returns code so plugins can `return
     * host->set_error(err, MMGW_E_INVALID, "...")`. err may be NULL. */
    int32_t (*set_error)(struct mmgw_error *err, int32_t code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    /** Monotonic clock in nanoseconds. */
    uint64_t (*now_ns)(void);
};

/** A byte sink the host provides for variable-size output (text, JSON). append returns 0 or
 * MMGW_E_NOMEM / MMGW_E_TOO_LARGE. */
struct mmgw_sink {
    void *ctx;
    int32_t (*append)(void *ctx, const char *data, uint64_t len);
};

/** Vision constants of a model. Static; sizes in pixels. A field of 0 means "not applicable". */
struct mmgw_vision_params {
    uint32_t struct_size;
    uint32_t patch_size;          /* 14 */
    uint32_t temporal_patch_size; /* 2: frames per temporal patch; a still image is repeated */
    uint32_t merge_size;          /* 2: spatial merge (resize factor = patch_size * merge_size) */
    uint32_t channels;            /* 3 */
    int32_t resample;             /* enum mmgw_resample */
    float rescale;                /* 1/255 */
    float image_mean[3], image_std[3];
    /* images */
    uint64_t image_min_pixels, image_max_pixels;
    uint64_t image_max_total_pixels; /* hard cap after resizing (M3: 12,845,056); 0 = none */
    double max_aspect_ratio;         /* refused above this (200) */
    /* video */
    double video_fps; /* sampling rate, frames per second of video */
    uint32_t video_min_frames, video_max_frames;
    uint64_t video_min_pixels, video_max_pixels; /* per frame */
    uint64_t video_total_pixels;                 /* M3: cap on frames x area (refused past it);
                                                     Qwen2-VL: budget shared out per frame */
};

/** A media item after preprocessing, as the prompt expander sees it. */
struct mmgw_media_info {
    uint32_t struct_size;
    int32_t kind;                   /* enum mmgw_media_kind */
    int64_t grid_t, grid_h, grid_w; /* in patches */
    uint32_t n_frames;              /* frames sampled (video), before temporal padding */
    const uint32_t *frame_indices;  /* source frame numbers, n_frames of them; NULL for images */
    double source_fps;              /* the video's own frame rate; 0 if unknown */
};

/** One piece of an expanded prompt: plain text to tokenize, or `count` copies of one special token
 * given by its text (the host maps it to an id with the tokenizer's added-token table). Placeholder
 * runs are where the model's media embeddings go. Strings are static or owned by the plugin instance
 * and valid until the next call on it. */
enum mmgw_seg_kind { MMGW_SEG_TEXT = 0, MMGW_SEG_TOKEN = 1 };
struct mmgw_prompt_seg {
    int32_t kind;        /* enum mmgw_seg_kind */
    int32_t placeholder; /* 1 for a run of media placeholder tokens */
    const char *text;    /* the text, or the special token's text */
    uint32_t text_len;
    uint32_t count; /* repetitions (MMGW_SEG_TOKEN); 1 for text */
};

/** Receives expanded segments one by one. */
struct mmgw_seg_sink {
    void *ctx;
    int32_t (*emit)(void *ctx, const struct mmgw_prompt_seg *seg);
};

/** Output events of the streaming output parser. */
enum mmgw_out_kind {
    MMGW_OUT_CONTENT = 0,   /* visible answer text */
    MMGW_OUT_REASONING = 1, /* reasoning text (reasoning_content) */
    MMGW_OUT_TOOL_NAME = 2, /* a new tool call starts; text = function name; tool_index = its index */
    MMGW_OUT_TOOL_ARGS = 3  /* a fragment of the call's JSON arguments; fragments concatenate to JSON */
};
struct mmgw_out_sink {
    void *ctx;
    int32_t (*emit)(void *ctx, int32_t kind, int32_t tool_index, const char *text, uint64_t len);
};

/** Opaque per-instance state (created from the model's config block) and per-stream parser state. */
struct mmgw_plugin_instance;
struct mmgw_output_parser;

/** A plugin option as text from the config file: `plugin_option KEY VALUE;`. */
struct mmgw_option {
    const char *key;
    const char *value;
};

struct mmgw_plugin {
    /* ---- header: never moves ---- */
    uint32_t abi_major;
    uint32_t abi_minor;
    uint32_t struct_size; /* sizeof(struct mmgw_plugin) as the plugin was compiled */
    uint32_t reserved0;
    const char *name;        /* unique, [a-z0-9_]+, e.g. "m3" */
    const char *description; /* one line */

    /* ---- lifecycle ---- */
    /** Create an instance from options (n_options of them). Unknown keys are an MMGW_E_INVALID error
     * naming the key. On failure *out is NULL and nothing needs destroying. */
    int32_t (*create)(const struct mmgw_host_api *host, const struct mmgw_option *options, uint32_t n_options,
                      struct mmgw_plugin_instance **out, struct mmgw_error *err);
    void (*destroy)(struct mmgw_plugin_instance *inst);
    /** Whether this plugin serves a checkpoint's config.json model_type (1 yes, 0 no). Const. */
    int32_t (*match_model_type)(const char *model_type);

    /* ---- vision (all const) ---- */
    /** Constants of this instance (options may change budgets). Valid until destroy. */
    const struct mmgw_vision_params *(*vision_params)(const struct mmgw_plugin_instance *inst);
    /** Target size for an image (kind IMAGE, n_frames 1) or for every frame of a video with n_frames
     * sampled frames. Refuses bad aspect ratios and budgets with MMGW_E_TOO_LARGE / MMGW_E_INVALID. */
    int32_t (*smart_resize)(const struct mmgw_plugin_instance *inst, int32_t kind, uint32_t height,
                            uint32_t width, uint32_t n_frames, uint32_t *out_height, uint32_t *out_width,
                            struct mmgw_error *err);
    /** Choose source frames of a video with total_frames frames at fps frames/s. Writes at most cap
     * indices (ascending, in [0, total_frames)), sets *n_out. cap is at least video_max_frames. */
    int32_t (*sample_frames)(const struct mmgw_plugin_instance *inst, uint64_t total_frames, double fps,
                             uint32_t *indices, uint32_t cap, uint32_t *n_out, struct mmgw_error *err);
    /** Number of placeholder tokens the model consumes for a grid (M3: t*h*w / merge^2). */
    uint64_t (*num_placeholder_tokens)(const struct mmgw_plugin_instance *inst, int32_t kind, int64_t grid_t,
                                       int64_t grid_h, int64_t grid_w);

    /* ---- prompt ---- */
    /** Render a chat request into prompt text. request_json is the OpenAI request body after the host's
     * normalisation: every media part is {"type":"image"|"video","mmgw_media":K} (K = index into the
     * request's media list) and chat_template_kwargs is passed through. Writes the prompt text to out
     * with one media marker (media_marker()) per rendered media part, and the K of each rendered marker,
     * in order, to media_order (at most media_cap entries; *n_media set). */
    int32_t (*render_chat)(const struct mmgw_plugin_instance *inst, const char *request_json,
                           uint64_t json_len, struct mmgw_sink *out, uint32_t *media_order,
                           uint32_t media_cap, uint32_t *n_media, struct mmgw_error *err);
    /** The special-token text that render_chat writes for a media part of this kind (static string). */
    const char *(*media_marker)(const struct mmgw_plugin_instance *inst, int32_t kind);
    /** Expand one media marker into segments (start marker, placeholders, timestamps...). */
    int32_t (*expand_media)(const struct mmgw_plugin_instance *inst, const struct mmgw_media_info *media,
                            struct mmgw_seg_sink *sink, struct mmgw_error *err);
    /** Special-token texts that end generation (e.g. "[e~["), NULL-terminated static array. */
    const char *const *(*stop_tokens)(const struct mmgw_plugin_instance *inst);
    /** Text to prepend as a BOS token when tokenizing, or NULL for none (M3: none). */
    const char *(*bos_token)(const struct mmgw_plugin_instance *inst);

    /* ---- output ---- */
    /** Start a parser for one choice's output. request_json as for render_chat (for tools and
     * chat_template_kwargs); prompt_text is the rendered prompt (a parser may look at its tail).
     * Returns NULL in *out with MMGW_OK when the plugin has no parser (the host passes text through). */
    int32_t (*parser_create)(const struct mmgw_plugin_instance *inst, const char *request_json,
                             uint64_t json_len, const char *prompt_text, uint64_t prompt_len,
                             struct mmgw_output_parser **out, struct mmgw_error *err);
    /** Feed newly decoded text (complete UTF-8 characters); events go to sink. Text that could still be
     * the start of a marker is held back until it can be decided. */
    int32_t (*parser_feed)(struct mmgw_output_parser *p, const char *text, uint64_t len,
                           struct mmgw_out_sink *sink, struct mmgw_error *err);
    /** End of output: flush what was held back and close any open tool call. */
    int32_t (*parser_finish)(struct mmgw_output_parser *p, struct mmgw_out_sink *sink,
                             struct mmgw_error *err);
    void (*parser_destroy)(struct mmgw_output_parser *p);
    /* ---- members appended in later minor versions go below this line ---- */

    /* ---- 1.1 ---- */
    /** Token texts the output parser reads as text (M3: "<mm:think>", "]<]minimax[>["...), NULL-terminated
     * static array, or NULL member / NULL result for none. The host shows these tokens to the parser even
     * when the tokenizer marks them special and the request skips special tokens (skip_special_tokens). */
    const char *const *(*parser_tokens)(const struct mmgw_plugin_instance *inst);
};

/** The single exported symbol. host lives until the plugin is unloaded. */
typedef const struct mmgw_plugin *(*mmgw_plugin_entry_fn)(const struct mmgw_host_api *host);
MMGW_PLUGIN_EXPORT const struct mmgw_plugin *mmgw_plugin_entry(const struct mmgw_host_api *host);

#ifdef __cplusplus
}
#endif
#endif
