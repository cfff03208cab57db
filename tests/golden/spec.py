"""An independent decoder of logspool's files, built from the tables of docs/FORMAT.md alone.

Nothing here imports logspool: the structure tables (marked ``<!-- layout: NAME -->``), the job
op table (``<!-- ops: jobs -->``) and the key-value value table (``<!-- values: kv -->``) are read
out of the document, checked for consistency (offsets follow from sizes; the size a caption states
is the sum of the fixed sizes), and interpreted: integers by ``struct``, checksums by
``zlib.crc32``, frames by ``zstandard``, bodies by ``json``. The golden tests compare what this
decodes with what logspool reads, so a wrong size, offset, type or checksum range in the document
fails them.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT_MD = Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"

_INTS = {"u8": "<B", "u16": "<H", "u32": "<I", "u64": "<Q", "i64": "<q", "f64": "<d"}
_INT_SIZES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i64": 8, "f64": 8}
_CRC_RANGE = re.compile(r"CRC-32 of bytes (\S+?)\.\.(\S+)")


class SpecError(Exception):
    """The document is inconsistent, or bytes do not decode as it says."""


def document() -> str:
    return FORMAT_MD.read_text()


def vectors(text: str | None = None) -> dict[str, bytes]:
    """Every ```hex NAME block of the document."""
    found = re.findall(r"```hex ([a-z-]+)\n(.*?)```", text or document(), re.S)
    return {name: bytes.fromhex(body.replace("\n", " ")) for name, body in found}


# --- expressions: "32+length", "74+key_size+domain_size", "20 + 8 (times) count" ---------------
def evaluate(expr: str, env: dict[str, Any]) -> int:
    """The value of a size or offset expression: integers, names of decoded fields (a string or
    bytes field stands for its byte length), + and - and the signs of multiplication."""

    def name(m: re.Match[str]) -> str:
        key = m.group(0)
        if key not in env:
            raise SpecError(f"{expr!r}: {key!r} is not a field decoded before it")
        value = env[key]
        if isinstance(value, str):
            value = len(value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, bytes | bytearray | memoryview):
            value = len(value)
        return str(int(value))

    code = re.sub(r"[A-Za-z_][A-Za-z_0-9]*", name, expr.replace("\u00d7", "*"))
    if not re.fullmatch(r"[\d\s+\-*()]+", code):
        raise SpecError(f"not an expression: {expr!r}")
    result = eval(code, {"__builtins__": {}})  # only digits and operators are left
    if not isinstance(result, int):
        raise SpecError(f"{expr!r} is not an integer")
    return result


# --- structure tables ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    offset: str
    size: str
    type: str
    name: str
    value: str


@dataclass(frozen=True)
class Layout:
    name: str
    caption: str
    fields: tuple[Field, ...]

    def fixed_size(self) -> int:
        """The sum of the fields whose size is a number (the N of "N + name_size bytes")."""
        return sum(int(f.size) for f in self.fields if f.size.isdigit())

    def decode(
        self, buf: bytes, start: int = 0, env: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], int]:
        """The fields of the structure at ``start`` of ``buf``, and the offset after it. Checks
        every offset, magic, constant and CRC the table states (SpecError if one fails)."""
        values: dict[str, Any] = dict(env or {})
        pos = start
        for f in self.fields:
            if start + evaluate(f.offset, values) != pos:
                raise SpecError(f"{self.name}.{f.name}: offset {f.offset} is not where the fields before end")
            size = evaluate(f.size, values)
            raw = buf[pos : pos + size]
            if size < 0 or len(raw) != size:
                raise SpecError(f"{self.name}.{f.name}: {size} bytes wanted at {pos}, {len(raw)} there")
            values[f.name] = convert(f.type, raw, f"{self.name}.{f.name}")
            check_value(self.name, f, values[f.name], buf, start, values)
            pos += size
        return values, pos


def convert(kind: str, raw: bytes, what: str) -> Any:
    if kind in _INTS:
        if len(raw) != _INT_SIZES[kind]:
            raise SpecError(f"{what}: a {kind} of {len(raw)} bytes")
        return struct.unpack(_INTS[kind], raw)[0]
    if kind == "bytes":
        return bytes(raw)
    try:
        if kind == "UTF-8":
            return bytes(raw).decode("utf-8")
        if kind == "text":  # the job journal's text: UTF-8 and encoded surrogates (§14)
            return bytes(raw).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as err:
        raise SpecError(f"{what}: not {kind}: {err}") from None
    raise SpecError(f"{what}: unknown type {kind!r}")


def check_value(layout: str, f: Field, value: Any, buf: bytes, start: int, env: dict[str, Any]) -> None:
    """What the value column states and can be checked: a magic, a single number, a CRC range."""
    cell = f.value.strip()
    magic = re.fullmatch(r"`([A-Z0-9]+)`", cell)  # (a magic with a comment is checked by its reader)
    if f.type == "bytes" and magic and len(magic.group(1)) == evaluate(f.size, env):
        if value != magic.group(1).encode():
            raise SpecError(f"{layout}.{f.name}: {value!r}, the table says {magic.group(1)}")
    elif f.type in _INTS and cell.isdigit() and value != int(cell):
        raise SpecError(f"{layout}.{f.name}: {value}, the table says {cell}")
    crc = _CRC_RANGE.search(cell)
    if crc:
        first, last = evaluate(crc.group(1), env), evaluate(crc.group(2).rstrip(".,;"), env)
        expected = zlib.crc32(buf[start + first : start + last + 1])
        if value != expected:
            raise SpecError(
                f"{layout}.{f.name}: 0x{value:08x}, the CRC-32 of bytes {first}..{last} is 0x{expected:08x}"
            )


def _rows(lines: list[str], at: int) -> list[list[str]]:
    """The body rows of the Markdown table starting at line ``at`` (its header and rule skipped)."""
    rows = []
    for line in lines[at + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def layouts(text: str | None = None) -> dict[str, Layout]:
    """Every structure table of the document, checked: the fields' numeric offsets follow from the
    sizes before them, and the caption's stated size (the first number after "(") is the sum of
    the fixed sizes."""
    lines = (text or document()).split("\n")
    out: dict[str, Layout] = {}
    for i, line in enumerate(lines):
        m = re.fullmatch(r"<!-- layout: ([a-z0-9-]+) -->", line.strip())
        if not m:
            continue
        header = [c.strip() for c in lines[i + 1].strip().strip("|").split("|")]
        if header[:4] != ["offset", "size", "type", "field"]:
            raise SpecError(f"layout {m.group(1)}: the table's columns are {header}")
        fields = []
        for cells in _rows(lines, i + 1):
            offset, size, kind, name = cells[:4]
            fields.append(Field(offset, size, kind, name.strip("`"), cells[4] if len(cells) > 4 else ""))
        caption = next(
            (lines[k] for k in range(i - 1, 0, -1) if lines[k].startswith("#") or lines[k].endswith(":")),
            "",
        )
        layout = Layout(m.group(1), caption, tuple(fields))
        position = 0
        for f in fields:
            if not f.offset.isdigit():
                break
            if int(f.offset) != position:
                raise SpecError(
                    f"layout {layout.name}: {f.name} at offset {f.offset}, the sizes before say {position}"
                )
            if not f.size.isdigit():
                break
            position += int(f.size)
        stated = re.search(r"\((\d+)[ +b]", caption.replace(",", ""))
        if stated is None:
            raise SpecError(f"layout {layout.name}: its caption {caption!r} states no size")
        if int(stated.group(1)) != layout.fixed_size():
            raise SpecError(
                f"layout {layout.name}: the caption says {stated.group(1)} bytes, "
                f"the fields add up to {layout.fixed_size()}"
            )
        out[layout.name] = layout
    return out


# --- the job journal's op table ------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    name: str
    kind: str  # u8 ... i64, "zero", "text", "bytes", "list" (of ints), "group"
    count: str = ""  # the size or count field ("rest": the rest of the op)
    items: tuple[Item, ...] = ()


def _split(spec: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*parts, cur.strip()] if cur.strip() else parts


def parse_items(spec: str) -> tuple[Item, ...]:
    out = []
    for part in _split(spec):
        if m := re.fullmatch(r"(\d+) zero", part):
            out.append(Item("", "zero", m.group(1)))
        elif m := re.fullmatch(r"(\w+) \((.*)\)\[(\w+)\]", part):
            out.append(Item(m.group(1), "group", m.group(3), parse_items(m.group(2))))
        elif m := re.fullmatch(r"(\w+) (text|bytes)\[(\w+)\]", part):
            out.append(Item(m.group(1), m.group(2), m.group(3)))
        elif m := re.fullmatch(r"(\w+) (u8|u16|u32|u64|i64)\[(\w+)\]", part):
            out.append(Item(m.group(1), "list", m.group(3), (Item("", m.group(2)),)))
        elif m := re.fullmatch(r"(\w+) (u8|u16|u32|u64|i64)", part):
            out.append(Item(m.group(1), m.group(2)))
        else:
            raise SpecError(f"op layout item {part!r} is not of the grammar of §14.1")
    return tuple(out)


def decode_items(items: tuple[Item, ...], buf: bytes, pos: int, values: dict[str, Any]) -> int:
    for item in items:
        if item.kind == "zero":
            pos += int(item.count)
        elif item.kind in _INTS:
            size = _INT_SIZES[item.kind]
            values[item.name] = convert(item.kind, buf[pos : pos + size], item.name)
            pos += size
        elif item.kind in ("text", "bytes"):
            size = len(buf) - pos if item.count == "rest" else values[item.count]
            values[item.name] = convert(
                "bytes" if item.kind == "bytes" else "text", buf[pos : pos + size], item.name
            )
            if (
                len(
                    values[item.name].encode("utf-8", "surrogatepass")
                    if item.kind == "text"
                    else values[item.name]
                )
                != size
            ):
                raise SpecError(f"{item.name}: runs past the end of the op")
            pos += size
        else:  # a list of integers, or of groups
            found: list[Any] = []
            for _ in range(values[item.count]):
                one: dict[str, Any] = {}
                pos = decode_items(item.items, buf, pos, one)
                found.append(one[""] if item.kind == "list" else one)
            values[item.name] = found
        if pos > len(buf):
            raise SpecError(f"the op ends inside {item.name or 'its zero bytes'}")
    return pos


@dataclass(frozen=True)
class OpType:
    code: int
    name: str
    items: tuple[Item, ...]
    size: str


def job_ops(text: str | None = None) -> dict[int, OpType]:
    lines = (text or document()).split("\n")
    at = next(i for i, line in enumerate(lines) if line.strip() == "<!-- ops: jobs -->")
    out = {}
    for code, op, spec, size in _rows(lines, at + 1):
        out[int(code)] = OpType(int(code), op.split()[0], parse_items(spec), size)
    return out


def decode_job_op(buf: bytes, ops: dict[int, OpType]) -> tuple[str, dict[str, Any]]:
    """(op name, fields) of one op record's payload, by the table; SpecError if it does not fit."""
    op = ops.get(buf[0]) if buf else None
    if op is None:
        raise SpecError(f"unknown op type {buf[:1]!r}")
    values: dict[str, Any] = {}
    end = decode_items(op.items, buf, 0, values)
    if "Σ" not in op.size and evaluate(op.size, values) != end:
        raise SpecError(
            f"{op.name}: the table's size {op.size} is {evaluate(op.size, values)}, the layout {end}"
        )
    if op.name.endswith("_MANY") and (end != len(buf) or not 1 <= values["count"] <= 65536):
        raise SpecError(f"{op.name}: {len(buf)} bytes, its {values['count']} entries end at {end}")
    return op.name, values


# --- the key-value store's value table ----------------------------------------------------------
def kv_value_types(text: str | None = None) -> dict[int, tuple[str, str]]:
    lines = (text or document()).split("\n")
    at = next(i for i, line in enumerate(lines) if line.strip() == "<!-- values: kv -->")
    return {int(code): (name, encoding) for code, name, encoding in _rows(lines, at + 1)}


def decode_kv_value(vtype: int, raw: bytes, types: dict[int, tuple[str, str]]) -> Any:
    name, encoding = types[vtype]
    if encoding.startswith("none"):
        if raw:
            raise SpecError(f"a {name} value of {len(raw)} bytes")
        return None
    if encoding == "any":
        return raw
    if encoding == "UTF-8":
        return convert("UTF-8", raw, name)
    kind = encoding.split()[0]
    value = convert(kind, raw, name)
    if name == "boolean":
        if value not in (0, 1):
            raise SpecError(f"boolean byte {value}")
        return bool(value)
    return value


# --- whole files -----------------------------------------------------------------------------------
@dataclass
class LogContent:
    """What a one-shot reader following §4, §5 and §9.2 finds in a log directory."""

    meta: dict[str, Any]
    meta_version: int
    headers: dict[int, dict[str, Any]]  # by base lsn
    records: list[dict[str, Any]]  # plain and compressed records, payload decompressed
    seals: list[dict[str, Any]]
    gaps: list[tuple[int, int, str, int]]  # (first lsn, next lsn, note, offset)
    index_expected: dict[int, list[tuple[int, int, int]]]  # §5.2's entries, by segment
    next_lsn: int


def read_json_framed(raw: bytes, magic: bytes) -> tuple[int, dict[str, Any]]:
    """A file framed as the meta file (§6): its version and JSON body (§6.1 for the meta)."""
    import json

    head, end = layouts()["meta"].decode(raw)
    if head["magic"] != magic or end != len(raw) or head["body_size"] > 65536:
        raise SpecError(f"not a {magic!r} file of {len(raw)} bytes")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise SpecError(f"duplicate keys in {keys}")
        return dict(pairs)

    body = json.loads(head["body"].decode("utf-8"), object_pairs_hook=no_duplicates)
    if not isinstance(body, dict):
        raise SpecError("the body is not a JSON object")
    return int(head["version"]), body


def check_meta(body: dict[str, Any], version: int) -> None:
    """§6.1, strictly: the required keys, integers in range, the version that goes with them."""
    ranges = {
        "created_ns": (0, 2**64 - 1),
        "segment_size_max": (4096, 2**32),
        "index_interval": (512, 2**32),
        "record_size_max": (0, 268435456),
    }
    for key, (low, high) in ranges.items():
        value = body[key]
        if type(value) is not int or not low <= value <= high:
            raise SpecError(f"meta {key} = {value!r}")
    if not re.fullmatch(r"[0-9a-f]{32}", body["log_id"]):
        raise SpecError(f"meta log_id = {body['log_id']!r}")
    compressed = body.get("compression") is not None
    if compressed and (body["compression"] != "zstd" or not -7 <= body["compression_level"] <= 22):
        raise SpecError(f"meta compression {body['compression']!r} level {body.get('compression_level')!r}")
    if version != (2 if compressed else 1):
        raise SpecError(f"meta version {version} with compression {body.get('compression')!r}")


def _decompress(frame: bytes, size_max: int) -> bytes:
    import zstandard

    size = zstandard.frame_content_size(frame)
    if not 0 <= size <= size_max:
        raise SpecError(f"zstd frame content size {size}")
    d = zstandard.ZstdDecompressor().decompressobj()
    out = d.decompress(frame)
    if len(out) != size or d.unused_data:
        raise SpecError(f"zstd frame of {size} bytes gave {len(out)}, {len(d.unused_data)} bytes after it")
    return bytes(out)


def read_log(path: Path) -> LogContent:
    """Read a log directory as §4-§6 and §9.2 say (a one-shot reader; every check is the
    document's). SpecError at anything a reader must call damage."""
    table = layouts()
    version, meta = read_json_framed((path / "meta").read_bytes(), b"LOGSPOOL")
    check_meta(meta, version)
    size_max = meta["record_size_max"]
    bases = sorted(int(p.name[:20]) for p in path.iterdir() if re.fullmatch(r"\d{20}\.seg", p.name))
    content = LogContent(meta, version, {}, [], [], [], {}, bases[0] if bases else 0)
    lsn = content.next_lsn
    for n, base in enumerate(bases):
        newest = n == len(bases) - 1
        data = (path / f"{base:020d}.seg").read_bytes()
        header, pos = table["segment-header"].decode(data)
        if header["base_lsn"] != base or header["version"] not in (1, 2) or base != lsn:
            raise SpecError(f"segment {base}: header {header}, expected lsn {lsn}")
        content.headers[base] = header
        due, entries = 0, []
        sealed = False
        while pos < len(data):
            if not any(data[pos : pos + 32]):
                if not newest or any(data[pos:]):
                    raise SpecError(f"segment {base}: zeros at {pos}, then bytes or another segment")
                break  # the preallocated zeros after the newest segment's records
            rec, end = table["record"].decode(data, pos)
            if rec["lsn"] != lsn or rec["length"] > size_max or rec["durable_lsn"] > rec["lsn"]:
                raise SpecError(f"segment {base}: record at {pos}: {rec['lsn']} for lsn {lsn}")
            if rec["flags"] == 0x1:
                if rec["length"] or end != len(data):
                    raise SpecError(f"segment {base}: a seal at {pos} with a payload or bytes after it")
                content.seals.append({**rec, "offset": pos, "base": base})
                sealed = True
                pos = end
                break
            if rec["flags"] == 0x2:
                payload = rec["payload"]
                if len(payload) >= 8:
                    gap, _ = table["gap-payload"].decode(payload, 0, {"length": len(payload)})
                    next_lsn, note = gap["next_lsn"], gap["note"].rstrip(b"\0").decode("utf-8", "replace")
                else:
                    next_lsn, note = lsn + 1, ""
                if next_lsn <= lsn or rec["durable_lsn"] != 0:
                    raise SpecError(f"segment {base}: gap at {pos} from {lsn} to {next_lsn}")
                content.gaps.append((lsn, next_lsn, note, pos))
                lsn = next_lsn
            elif rec["flags"] in (0, 0x4):
                payload = rec["payload"] if rec["flags"] == 0 else _decompress(rec["payload"], size_max)
                content.records.append({**rec, "payload": payload, "offset": pos, "base": base})
                if pos >= due:
                    entries.append((lsn, rec["timestamp"], pos))
                    due = (pos // meta["index_interval"] + 1) * meta["index_interval"]
                lsn += 1
            else:
                raise SpecError(f"segment {base}: flags 0x{rec['flags']:x} at {pos}")
            pos = end
        if not newest and not sealed:
            raise SpecError(f"segment {base}: an older segment without a seal")
        if sealed and not newest and lsn != bases[n + 1]:
            raise SpecError(f"segment {base}: the seal names {lsn}, the next segment is {bases[n + 1]}")
        content.index_expected[base] = entries
    content.next_lsn = lsn
    stamps = [r["timestamp"] for r in content.records]
    if stamps != sorted(stamps):
        raise SpecError("timestamps go back")
    return content


def read_index(raw: bytes) -> tuple[dict[str, Any], list[tuple[int, int, int]]]:
    """An index file: its header and its entries up to the first invalid one (§5.2)."""
    table = layouts()
    header, pos = table["index-header"].decode(raw)
    entries: list[tuple[int, int, int]] = []
    while pos + 32 <= len(raw):
        try:
            entry, pos = table["index-entry"].decode(raw, pos)
        except SpecError:
            break
        if entries and (entry["lsn"] <= entries[-1][0] or entry["offset"] <= entries[-1][2]):
            break
        entries.append((entry["lsn"], entry["timestamp"], entry["offset"]))
    return header, entries


def read_checkpoint(raw: bytes, file_name: str) -> tuple[dict[str, Any], list[dict[str, Any] | None]]:
    """A checkpoint file (§6.2): the position it holds, and what each slot holds (version 2)."""
    import hashlib

    table = layouts()
    slots: list[dict[str, Any] | None] = []
    if raw[:8] == b"LOGSPCKP" and raw[8:10] == b"\x01\x00":
        cp, end = table["checkpoint-v1"].decode(raw)
        if end != len(raw):
            raise SpecError("a version-1 checkpoint with bytes after it")
        best = cp
    else:
        if len(raw) < 1024 or len(raw) % 1024:
            raise SpecError(f"a checkpoint of {len(raw)} bytes")
        size = len(raw) // 2
        for k in (0, 1):
            slot = raw[k * size : (k + 1) * size]
            try:
                cp, end = table["checkpoint-slot"].decode(slot)
                slots.append(cp if end <= size and cp["generation"] >= 1 else None)
            except SpecError:
                if (
                    any(slot[:48])
                    and slot[:8] == b"LOGSPCKP"
                    and slot[8:10] not in (b"\x01\x00", b"\x02\x00")
                ):
                    raise
                slots.append(None)
        valid = [cp for cp in slots if cp is not None]
        if not valid or len({cp["name"] for cp in valid}) != 1:
            raise SpecError(f"checkpoint slots {slots}")
        best = max(valid, key=lambda cp: cp["generation"])  # (slot 0 on a tie)
    if "cp." + hashlib.sha256(best["name"].encode()).hexdigest() != file_name:
        raise SpecError(f"checkpoint of {best['name']!r} stored as {file_name}")
    return best, slots


def read_sync(raw: bytes) -> dict[str, Any]:
    sync, _ = layouts()["sync-file"].decode(raw[:128].ljust(128, b"\0"))
    if sync["magic"] != b"LOGSPSY2":
        sync.update(mark_base=0, mark_offset=0, boot_id=bytes(16))
    return sync
