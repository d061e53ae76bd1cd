#!/usr/bin/python3
"""Video matrix: frame rates, durations, codecs, pixel formats, containers, rotation, odd sizes, audio first,
through mmgw-preprocess with both plugins, each compared with the reference of media_ref.py (every frame
decoded by the FFmpeg CLI, torchcodec's frame count and average rate, the M3 / qwen-vl-utils frame rules,
Pillow's bicubic per frame).

Checks per clip and plugin: the sampled frame indices and the grid exactly; values mean |d| <= 0.01,
p99 <= 0.05 and >= 99 % exactly equal (only Pillow's resize rounding differs from torchvision's now and
then), all of them when the plugin keeps the frame size (most clips are 168 x 112 for that): the decoded
frames are then compared bit for bit.

Run by hand: MMGW_BUILD=build /usr/bin/python3 tests/unit/media/test_matrix_videos.py [CLIP NAME...]
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import media_ref as ref  # noqa: E402

BIN = ref.cli_path()
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


SRC = "testsrc2=size={w}x{h}:rate={r}"


def clips():
    """(file name, ffmpeg arguments after -y). Small frames keep the whole matrix within seconds."""
    c = []

    def add(name, *args):
        c.append((name, list(args)))

    x264 = ["-c:v", "libx264", "-preset", "ultrafast"]
    # frame rates and durations (frame counts hitting the 4-frame minimum, odd counts, the even rounding)
    add("r24_3s.mp4", "-f", "lavfi", "-i", SRC.format(w=320, h=240, r=24), "-frames:v", "72", *x264, "-pix_fmt", "yuv420p")
    add("r25_0.6s.mp4", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "15", *x264, "-pix_fmt", "yuv420p")
    add("r2997_10s.mp4", "-f", "lavfi", "-i", SRC.format(w=160, h=120, r="30000/1001"), "-frames:v", "300", *x264,
        "-pix_fmt", "yuv420p")
    add("r60_2s.mp4", "-f", "lavfi", "-i", SRC.format(w=160, h=90, r=60), "-frames:v", "121", *x264, "-pix_fmt", "yuv420p")
    add("odd75.mkv", "-f", "lavfi", "-i", SRC.format(w=128, h=96, r=25), "-frames:v", "75", *x264, "-pix_fmt", "yuv420p")
    add("three.mp4", "-f", "lavfi", "-i", SRC.format(w=128, h=96, r=25), "-frames:v", "3", *x264, "-pix_fmt", "yuv420p")
    add("one.mp4", "-f", "lavfi", "-i", SRC.format(w=128, h=96, r=25), "-frames:v", "1", *x264, "-pix_fmt", "yuv420p")
    add("long_2min.mp4", "-f", "lavfi", "-i", SRC.format(w=64, h=48, r=10), "-frames:v", "1200", *x264, "-g", "50",
        "-pix_fmt", "yuv420p")
    add("cap_800s.mkv", "-f", "lavfi", "-i", SRC.format(w=32, h=32, r=2), "-frames:v", "1600", *x264, "-g", "20",
        "-pix_fmt", "yuv420p")
    # variable frame rate: 30 fps for 2 s, then 10 fps for 3 s
    vfr = ["-vf", "setpts='if(lt(N,60),N/30,2+(N-60)/10)/TB'", "-fps_mode", "vfr"]
    add("vfr.mp4", "-f", "lavfi", "-i", SRC.format(w=160, h=120, r=30), "-frames:v", "90", *vfr, *x264, "-pix_fmt", "yuv420p")
    add("vfr.mkv", "-f", "lavfi", "-i", SRC.format(w=160, h=120, r=30), "-frames:v", "90", *vfr, *x264, "-pix_fmt", "yuv420p")
    # codecs and containers
    add("hevc.mp4", "-f", "lavfi", "-i", SRC.format(w=224, h=112, r=25), "-frames:v", "50", "-c:v", "libx265", "-preset",
        "ultrafast", "-x265-params", "log-level=none", "-pix_fmt", "yuv420p", "-tag:v", "hvc1")
    add("mpeg4.avi", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "50", "-c:v", "mpeg4", "-q:v", "4")
    add("vp9.webm", "-f", "lavfi", "-i", SRC.format(w=320, h=240, r=25), "-frames:v", "80", "-c:v", "libvpx-vp9", "-b:v",
        "300k", "-deadline", "realtime", "-cpu-used", "8")
    add("mjpeg.avi", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", "-c:v", "mjpeg", "-q:v", "3")
    add("mjpeg422.mov", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", "-c:v", "mjpeg",
        "-pix_fmt", "yuvj422p", "-q:v", "3")
    add("av1.mp4", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "30", "-c:v", "libaom-av1",
        "-cpu-used", "8", "-row-mt", "1", "-b:v", "200k")
    add("vp8.webm", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "30", "-c:v", "libvpx", "-b:v", "300k")
    add("mpeg2.mpg", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "30", "-c:v", "mpeg2video", "-q:v", "3")
    add("h264.ts", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "30", *x264, "-pix_fmt", "yuv420p")
    add("theora.ogv", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "30", "-c:v", "libtheora", "-q:v", "7")
    add("h264.mov", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=30), "-frames:v", "60", *x264, "-pix_fmt", "yuv420p")
    # pixel formats
    add("yuvj420p.mp4", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", *x264, "-pix_fmt", "yuvj420p")
    add("yuv422p.mp4", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", *x264, "-pix_fmt", "yuv422p")
    add("yuv444p.mp4", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", *x264, "-pix_fmt", "yuv444p")
    add("yuv420p10.mp4", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", *x264, "-pix_fmt",
        "yuv420p10le")
    add("hevc10.mkv", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", "-c:v", "libx265", "-preset",
        "ultrafast", "-x265-params", "log-level=none", "-pix_fmt", "yuv420p10le")
    add("rgb24.mkv", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", "-c:v", "libx264rgb", "-preset",
        "ultrafast", "-pix_fmt", "rgb24")
    add("bt709.mp4", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "40", *x264, "-pix_fmt", "yuv420p",
        "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709")
    add("big_720p.mp4", "-f", "lavfi", "-i", SRC.format(w=1280, h=720, r=24), "-frames:v", "30", *x264, "-pix_fmt", "yuv420p")
    # odd dimensions
    add("odd_vp9.webm", "-f", "lavfi", "-i", SRC.format(w=320, h=240, r=25), "-vf", "scale=321:241", "-frames:v", "30",
        "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "200k")
    add("odd_444.mp4", "-f", "lavfi", "-i", SRC.format(w=176, h=144, r=25), "-vf", "scale=175:143", "-frames:v", "30",
        *x264, "-pix_fmt", "yuv444p")
    add("odd_mpeg4.avi", "-f", "lavfi", "-i", SRC.format(w=176, h=144, r=25), "-vf", "scale=173:99", "-frames:v", "30",
        "-c:v", "mpeg4", "-q:v", "3")
    # rotation metadata (applied, as FFmpeg, torchcodec >= 0.11 and decord do)
    for deg in (90, 180, 270):  # the display matrix is written afterwards (see main)
        add(f"rot{deg}.mp4", "-f", "lavfi", "-i", SRC.format(w=192, h=108, r=24), "-frames:v", "48", *x264, "-pix_fmt",
            "yuv420p")
    add("rot90.mov", "-f", "lavfi", "-i", SRC.format(w=160, h=96, r=30), "-frames:v", "40", *x264, "-pix_fmt", "yuv420p")
    # an edit list starting mid-GOP (a stream copy from 1.3 s): the packets before it are decoded for
    # reference, flagged discard, and are not frames (see main)
    add("editlist.mp4", "-f", "lavfi", "-i", SRC.format(w=168, h=112, r=25), "-frames:v", "150", *x264, "-g", "50",
        "-pix_fmt", "yuv420p")
    # an audio stream before the video stream
    add("audio_first.mp4", "-f", "lavfi", "-t", "2", "-i", "sine", "-f", "lavfi", "-t", "2", "-i",
        SRC.format(w=160, h=120, r=25), "-map", "0:a", "-map", "1:v", *x264, "-pix_fmt", "yuv420p", "-c:a", "aac")
    add("audio_first.mkv", "-f", "lavfi", "-t", "2", "-i", "sine", "-f", "lavfi", "-t", "2", "-i",
        SRC.format(w=160, h=120, r=25), "-map", "0:a", "-map", "1:v", *x264, "-pix_fmt", "yuv420p", "-c:a", "libvorbis")
    return c


def main():
    if not os.access(BIN, os.X_OK):
        print(f"SKIP: {BIN} not built")
        return 77
    if not ref.have_tools():
        print("SKIP: the ffmpeg/ffprobe CLIs are needed to make test media")
        return 77
    only = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in clips():
            if only and name not in only:
                continue
            path = f"{tmp}/{name}"
            ref.ffmpeg(*args, path)
            if name.startswith("rot"):
                ref.set_mp4_rotation(path, int(name[3:name.index(".")]))
            if name == "editlist.mp4":
                ref.ffmpeg("-ss", "1.3", "-i", path, "-c", "copy", f"{tmp}/cut.mp4")
                os.replace(f"{tmp}/cut.mp4", path)
            info = ref.probe_stream(path)
            rot = info["rotation"] % 180 != 0
            w, h = (info["height"], info["width"]) if rot else (info["width"], info["height"])
            frames = ref.decode_all(path, w, h)
            total, fps = info["packets"], info["fps"] or info["avg_frame_rate"]
            note = ""
            if len(frames) != total:
                note = f" (FFmpeg decodes {len(frames)} frames)"
            check(len(frames) == total, f"{name}: {total} packets but the FFmpeg CLI decodes {len(frames)} frames")
            print(f"{name}: {w}x{h} {total} frames, {fps:.4f} fps (header {info['avg_frame_rate']}), "
                  f"rotation {info['rotation']}{note}")
            # the 768-frame cap through Qwen2-VL means 768 frames upscaled to its 100,352-pixel minimum: a
            # gigabyte of output; the cap is the same rule for both plugins, M3 checks it
            plugins = ("m3",) if name.startswith("cap_") else ("m3", "qwen2vl")
            for plugin in plugins:
                want_idx = ref.frames_rule(total, fps, ref.VIDEO_FPS[plugin])
                if info["avg_frame_rate"] and abs(info["avg_frame_rate"] - fps) > 1e-9:
                    alt = ref.frames_rule(total, info["avg_frame_rate"], ref.VIDEO_FPS[plugin])
                    if alt != want_idx:
                        print(f"  {plugin}: the header's frame rate would sample {len(alt)} frames, not {len(want_idx)}")
                # long clips: the values of three temporal groups (first, middle, last) are compared, the
                # indices and grid in full (the whole tensor of 768 upscaled Qwen2-VL frames is a gigabyte)
                groups = list(range((len(want_idx) + 1) // 2))
                if len(groups) > 8:
                    groups = [0, len(groups) // 2, len(groups) - 1]
                sub = [want_idx[min(2 * g + k, len(want_idx) - 1)] for g in groups for k in (0, 1)]
                want = ref.video_reference(frames, sub if len(groups) < (len(want_idx) + 1) // 2 else want_idx,
                                           plugin, n_budget=len(want_idx))
                p = subprocess.run([BIN, "--plugin", plugin, "--video", path, "--out", f"{tmp}/v.st", "--quiet",
                                    "--print-prompt"], capture_output=True, text=True, timeout=120)
                if want is None:
                    check(p.returncode == 1, f"{plugin} {name}: the reference refuses it, we exit {p.returncode}")
                    continue
                check(p.returncode == 0, f"{plugin} {name}: exit {p.returncode}: {p.stderr.strip()}")
                if p.returncode:
                    continue
                o = ref.load_st(f"{tmp}/v.st")
                idx = [int(i) for i in o["video_frame_indices"]]
                check(idx == want_idx, f"{plugin} {name}: frames {idx[:12]}... ({len(idx)}) vs reference "
                      f"{want_idx[:12]}... ({len(want_idx)})")
                grid = tuple(int(v) for v in o["video_grid_thw"][0])
                rp, rgrid = want
                rgrid = ((len(want_idx) + 1) // 2,) + rgrid[1:]
                check(grid == rgrid, f"{plugin} {name}: grid {grid} vs reference {rgrid}")
                if idx != want_idx or grid != rgrid:
                    continue
                if plugin == "m3":
                    # M3's prompt: each temporal group's first frame time, frame index / source fps, "%.1f"
                    stamps = re.findall(r"\]<\]([0-9.]+) seconds\[>\[", p.stdout)
                    want_stamps = [f"{want_idx[2 * g] / fps:.1f}" for g in range(rgrid[0])]
                    check(stamps == want_stamps, f"m3 {name}: timestamps {stamps[:6]} vs {want_stamps[:6]}")
                per = grid[1] * grid[2]
                pv = o["pixel_values_videos"].reshape(grid[0], per, -1)[groups].reshape(-1, rp.shape[1])
                mean, p99, exact = ref.compare(pv, rp)
                print(f"  {plugin:8s} {len(idx):4d} frames grid {str(grid):14s} mean {mean:.5f} p99 {p99:.5f} "
                      f"exact {100 * exact:6.2f}%")
                check(mean <= 0.01 and p99 <= 0.05, f"{plugin} {name}: mean {mean:.4f} p99 {p99:.4f}")
                # frames the plugin does not resize compare the decoded pixels themselves: all must be equal
                same = (grid[1] * 14, grid[2] * 14) == (h, w)
                check(exact >= (1.0 if same else 0.99), f"{plugin} {name}: only {100 * exact:.2f}% exact")
    if failures:
        print(f"FAILED: {len(failures)} checks")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
