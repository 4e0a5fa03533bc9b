"""Choose encoder, pixel format and options for an output file.

Kept apart from the writer so the decisions (and their reasons) are in one
small place and can be tested without encoding anything.

Bit-exact round trips of BGR content (what the reader yields):

* ``ffv1`` + ``bgr0`` in ``.mkv``: lossless, every pixel identical.
* ``libx264`` + ``bgr0``/``bgr24``/``rgb24`` + ``crf=0``: encoded with
  ``libx264rgb`` at qp 0, identical pixels (H.264 RGB profile; few players).
* any YUV pixel format (including ``yuv444p`` at qp 0 and ``ffv1`` +
  ``yuv444p``): the YUV planes are lossless but the BGR->YUV->BGR
  conversion rounds, so pixels differ by about +-1-2.

x264 cannot encode odd widths/heights with chroma subsampling (yuv420p,
yuv422p). For such sizes we keep the exact resolution and switch to
``yuv444p`` (High 4:4:4 profile: plays in FFmpeg/VLC/mpv, not in most
browsers) rather than padding, because the output must match the input size.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import av

from streamdeid.config import OutputConfig
from streamdeid.types import StreamdeidError
from streamdeid.video.reader import ColorInfo

log = logging.getLogger(__name__)

RGB_PIX_FMTS = frozenset({"bgr0", "bgr24", "rgb24"})
X264_LIKE = frozenset({"libx264", "libx264rgb", "libx265"})
# The presets x264 and x265 both take (--preset); anything else made FFmpeg fail to open the encoder with
# "Invalid argument" once the run had started.
X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow",
                "placebo")
# Muxer options: fragmented MP4/MOV so a killed process leaves a playable file;
# a fragment starts at each keyframe and at least once per second.
# ``delay_moov`` postpones the (sample-less) moov to the first fragment so it
# can carry an edit list: without it the muxer forces the first frame to
# t=0 and shifts timestamps, breaking pts preservation and A/V offset.
FRAGMENTED_MP4 = {
    "movflags": "frag_keyframe+empty_moov+default_base_moof+delay_moov",
    "frag_duration": "1000000",
}
MP4_LIKE = frozenset({".mp4", ".m4v", ".mov"})
OUTPUT_FORMATS = {
    ".mp4": "mp4",
    ".m4v": "mp4",
    ".mov": "mov",
    ".mkv": "matroska",
    ".webm": "webm",
    ".avi": "avi",
    ".gif": "gif",
    ".ts": "mpegts",
}
# Muxers that only report their default codecs when asked what they accept.
UNQUERYABLE = frozenset({".ts"})
# ... what MPEG-TS carries (ISO 13818-1 stream types FFmpeg's muxer writes): an FFV1 or RGB stream put in one
# left a file with no video stream that the run reported written.
MPEGTS_CODECS = frozenset({"h264", "libx264", "libx264rgb", "hevc", "libx265", "mpeg2video", "mpeg1video", "mpeg4",
                           "aac", "mp2", "mp3", "libmp3lame", "ac3", "eac3", "opus", "libopus"})
# Encoders tried, in order, when an audio codec must be re-encoded.
AUDIO_FALLBACKS = ("aac", "libopus", "opus", "libmp3lame", "mp3", "pcm_s16le")


@dataclass
class VideoEncoding:
    codec: str
    pix_fmt: str
    options: dict[str, str] = field(default_factory=dict)


def output_format(ext: str) -> str:
    """The FFmpeg muxer for an output extension (raises on unknown ones)."""
    try:
        return OUTPUT_FORMATS[ext.lower()]
    except KeyError:
        known = ", ".join(sorted(OUTPUT_FORMATS))
        raise StreamdeidError(f"unsupported output extension {ext!r} (use one of {known})") from None


def muxer_options(ext: str) -> dict[str, str]:
    """Per-container options; packets are flushed as written for crash safety."""
    options = {"flush_packets": "1"}
    if ext.lower() in MP4_LIKE:
        options.update(FRAGMENTED_MP4)
    return options


def choose_video_encoding(config: OutputConfig, width: int, height: int, ext: str) -> VideoEncoding:
    """Resolve the configured codec/pix_fmt into something that will encode."""
    output_format(ext)  # reject unknown extensions before anything else
    chosen = config.codec != OutputConfig.codec  # a codec the user named (the default goes where it can)
    if ext.lower() == ".gif":
        if chosen:
            raise StreamdeidError(f"--codec {config.codec}: a .gif output is GIF; give another extension")
        return VideoEncoding("gif", "pal8")
    codec, pix_fmt = config.codec, config.pix_fmt or default_pix_fmt(config)
    if ext.lower() == ".webm" and codec in X264_LIKE and chosen:  # it was swapped for VP9 without a word
        raise StreamdeidError(f"--codec {codec}: WebM holds VP8, VP9 and AV1 only (--codec libvpx-vp9), or give "
                              "the output another extension")
    if ext.lower() == ".webm" and codec in X264_LIKE:
        # WebM holds VP8, VP9 and AV1 only: a .webm input's default output name ends in .webm too
        log.info("WebM cannot hold %s: encoding VP9", codec)
        codec = "libvpx-vp9"
        pix_fmt = config.pix_fmt or ("gbrp" if config.crf == 0 else "yuv420p")
    if codec in X264_LIKE and config.crf > 51:  # x264 and x265 stop at 51 and took more as 51 without a word
        raise StreamdeidError(f"--crf {config.crf}: {codec} takes 0-51 (63 is VP9's top)")
    if codec == "libx264" and pix_fmt in RGB_PIX_FMTS:
        codec = "libx264rgb"  # plain libx264 has no RGB input; this is its RGB twin
    supported = _encoder_pix_fmts(codec)
    if not supported:  # (rawvideo and the like name no pixel format)
        raise StreamdeidError(f"codec {codec} cannot be used for the output (try libx264, libx265, ffv1 or libvpx-vp9)")
    if pix_fmt not in supported:
        raise StreamdeidError(f"codec {codec} cannot encode pix_fmt {pix_fmt} (supported: {', '.join(supported)})")
    if codec in X264_LIKE and _subsampled(pix_fmt) and (width % 2 or height % 2):
        log.warning("%dx%d is odd-sized: %s needs even sizes, encoding as yuv444p instead", width, height, pix_fmt)
        pix_fmt = "yuv444p"
    return VideoEncoding(codec, pix_fmt, _codec_options(codec, config))


def default_pix_fmt(config: OutputConfig) -> str:
    """Lossless settings keep BGR (no YUV rounding), so restored faces stay bit-exact;
    lossy ones use yuv420p, which every player plays."""
    if config.codec == "ffv1":
        return "bgr0"
    if config.codec == "libx264" and config.crf == 0:
        return "bgr24"
    return "yuv420p"


def is_lossless(config: OutputConfig) -> bool:
    """Does this output keep every pixel (so the vault must too, for bit-exact recovery)?"""
    return config.codec == "ffv1" or (config.crf == 0 and (config.codec in X264_LIKE or config.codec == "libvpx-vp9"))


def _encoder_pix_fmts(codec: str) -> list[str]:
    try:
        enc = av.Codec(codec, "w")
    except (av.FFmpegError, ValueError):
        raise StreamdeidError(f"video encoder {codec!r} is not available in this FFmpeg build") from None
    if enc.type != "video":
        raise StreamdeidError(f"{codec!r} is not a video encoder")
    return [f.name for f in (enc.video_formats or [])]


def _subsampled(pix_fmt: str) -> bool:
    fmt = av.VideoFormat(pix_fmt)
    return not fmt.is_rgb and (fmt.chroma_width(3) != 3 or fmt.chroma_height(3) != 3)


def _codec_options(codec: str, config: OutputConfig) -> dict[str, str]:
    if codec in X264_LIKE:
        if config.preset not in X264_PRESETS:
            raise StreamdeidError(f"--preset {config.preset}: {codec} takes {', '.join(X264_PRESETS)}")
        options = {"preset": config.preset}
        if codec == "libx265":
            # x265 prints its settings to stderr (25 lines) unless told not to; its crf 0 is not lossless
            options["x265-params"] = "log-level=error" + (":lossless=1" if config.crf == 0 else "")
            if config.crf != 0:
                options["crf"] = str(config.crf)
        elif config.crf == 0:
            options["qp"] = "0"  # explicit: crf 0 alone is not lossless for 10-bit
        else:
            options["crf"] = str(config.crf)
        return options
    if codec == "libvpx-vp9":
        if config.crf == 0:
            return {"lossless": "1"}
        # cpu-used 4: libvpx's default (1) encodes 1080p at a few frames a second here
        return {"crf": str(config.crf), "b": "0", "row-mt": "1", "deadline": "good", "cpu-used": "4"}
    if codec == "ffv1":
        # level 3 allows slices (threads); slice CRCs detect damage on decode.
        return {"level": "3", "slicecrc": "1", "slices": "4"}
    return {}


def pick_audio_encoder(supported: set[str]) -> str | None:
    """First re-encoding target the output container accepts, or None.
    An empty ``supported`` means the muxer cannot tell: take the first."""
    for name in AUDIO_FALLBACKS:
        if not supported or name in supported:
            try:
                av.Codec(name, "w")
            except (av.FFmpegError, ValueError):
                continue
            return name
    return None


def tag_colors(stream: av.video.stream.VideoStream, color: ColorInfo) -> None:
    """Tag a YUV output like its source, so the writer's BGR->YUV matrix (and players) match the reader's.
    An RGB source (colorspace 0, as a gbrp VP9 or an RGB FFV1 file is tagged) has no YUV matrix to keep: the
    output is left untagged and limited range (tagged RGB, libvpx refused every YUV frame, "Invalid data")."""
    ctx = stream.codec_context
    rgb = color.colorspace == 0
    ctx.color_range = 2 if color.color_range == 2 and not rgb else 1  # keep full range, else limited
    if color.colorspace not in (0, 2):
        ctx.colorspace = color.colorspace
    if color.color_primaries != 2:
        ctx.color_primaries = color.color_primaries
    if color.color_trc != 2:
        ctx.color_trc = color.color_trc


def add_audio_encoder(container: av.container.OutputContainer, encoder: str,
                      source: av.audio.stream.AudioStream) -> av.stream.Stream:
    """An ``encoder`` stream for re-encoding ``source``: its rate if the encoder takes it (else the
    encoder's highest), its layout up to stereo."""
    codec = av.Codec(encoder, "w")
    rates = codec.audio_rates
    rate = source.rate if not rates or source.rate in rates else max(rates)
    layout = source.layout.name if source.channels <= 2 else "stereo"
    stream = container.add_stream(encoder, rate=rate, layout=layout)
    stream.format = codec.audio_formats[0].name
    return stream
