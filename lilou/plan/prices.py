"""Price files for ``lilou plan --prices``: CSV ``device,usd_per_hour``, one device per line.

``device`` is a GPU name or alias (the whole GPU, ``a10g``) or ``GPU/PROFILE`` for one MIG slice
(``a100-80gb/1g.10gb``). A MIG slice without a line of its own costs its parent GPU's price times its
share of the GPU's compute slices (``1g`` of a 7-slice A100: 1/7); the plan says where a price was derived.
"""
from __future__ import annotations

import csv
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path

from lilou.errors import LilouInputError
from lilou.hardware import Device

COLUMNS = ("device", "usd_per_hour")
MAX_BYTES = 1 << 20
#: Prices taken (USD per hour): beyond them a derived slice price or a cost overflowed to Infinity (1e308, invalid
#: JSON) or underflowed to 0.0 (1e-320); a real GPU costs cents to hundreds of dollars an hour.
MIN_PRICE, MAX_PRICE = 1e-6, 1e6
RANGE = "from 0.000001 to 1000000 USD per hour"


class Prices(dict):
    """``{device name: USD per hour}``, with the notes a plan repeats (a line naming a family of GPUs)."""

    def __init__(self, *args, notes: list[str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.notes = list(notes or [])

    def price(self, name: str, usd_per_hour: float, *, where: str, noted: str) -> None:
        """Price the device ``name`` names (any spelling ``--gpus`` takes); ``where`` prefixes an error (an unknown or
        repeated device), ``noted`` the note of a family's name."""
        try:
            device, notes = _priced_device(name)
        except LilouInputError as error:
            raise LilouInputError(f"{where}: {error}") from None
        if device.name in self:
            raise LilouInputError(f"{where}: {device.name} is priced twice")
        self[device.name] = usd_per_hour
        self.notes += [f"{noted}: {note}" for note in notes]


def checked_prices(prices: Mapping[str, float] | None) -> Prices | None:
    """Prices as the Python API takes them (``{"a10g": 1.01, "a100-80gb/1g.10gb": 0.5}``), checked as a ``--prices``
    file's lines are: device names resolved (a family's name says which board it priced), positive finite prices.
    A price file already read (:class:`Prices`) is taken as it is. Before, a negative price ranked its device first
    and a NaN one wrote invalid JSON."""
    if prices is None or isinstance(prices, Prices):
        return prices
    if not isinstance(prices, Mapping):
        raise LilouInputError(f"prices must map device names to USD per hour, e.g. {{'a10g': 1.01}}, not "
                              f"{type(prices).__name__}")
    checked = Prices()
    for name, price in prices.items():
        if not isinstance(name, str):
            raise LilouInputError(f"prices: device names are strings, not {name!r:.40}")
        # numbers.Real: numpy's float32 and int64 too (a DataFrame's column; they were "not a positive number")
        if isinstance(price, bool) or not isinstance(price, numbers.Real) or price <= 0 or \
                not (isinstance(price, numbers.Integral) or math.isfinite(price)):
            raise LilouInputError(f"prices[{name[:80]!r}]: {price!r:.40} is not a positive number of USD per hour")
        if not MIN_PRICE <= price <= MAX_PRICE:
            raise LilouInputError(f"prices[{name[:80]!r}]: {price!r:.40} is not a price {RANGE}")
        checked.price(name, float(price), where="prices", noted="prices")
    if not checked:
        raise LilouInputError("prices lists no device")
    return checked


def read_prices(path: str | os.PathLike[str]) -> Prices:
    """``{device name: USD per hour}`` keyed by :attr:`lilou.hardware.Device.name`; a bad file is one
    :class:`LilouInputError` line naming the file, the line and what is wrong. A line whose GPU name stands for a
    family (``a100``) prices the GPU that name resolves to everywhere in Lilou, and a note says so."""
    file = Path(path)
    if not file.is_file():
        raise LilouInputError(f"--prices: {file} is not a readable file")
    if file.stat().st_size > MAX_BYTES:
        raise LilouInputError(f"--prices: {file} is larger than {MAX_BYTES >> 20} MiB; a price file has one line per device")
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise LilouInputError(f"--prices: cannot read {file} as UTF-8 text ({error.__class__.__name__})") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None or [h.strip().lower() for h in header] != list(COLUMNS):
        raise LilouInputError(f"--prices: {file} must start with the header line 'device,usd_per_hour' "
                              f"(found {','.join(header) if header else 'an empty file'!r})")
    prices = Prices()
    for number, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 2:
            raise LilouInputError(f"--prices: {file} line {number}: expected 2 fields (device,usd_per_hour), "
                                  f"found {len(row)}")
        name, raw = row[0].strip(), row[1].strip()
        try:
            price = float(raw)
        except ValueError:
            raise LilouInputError(f"--prices: {file} line {number}: price {raw!r} is not a number") from None
        if not math.isfinite(price) or price <= 0:
            raise LilouInputError(f"--prices: {file} line {number}: price {raw!r} must be a positive number")
        if not MIN_PRICE <= price <= MAX_PRICE:
            raise LilouInputError(f"--prices: {file} line {number}: price {raw!r} is not a price {RANGE}")
        prices.price(name, price, where=f"--prices: {file} line {number}", noted=f"--prices line {number}")
    if not prices:
        raise LilouInputError(f"--prices: {file} lists no device")
    return prices


def _priced_device(name: str) -> tuple[Device, list[str]]:
    """The device a price names, in any spelling ``--gpus`` takes (``a100-80gb/1g.10gb``, CUDA's
    ``NVIDIA A100-SXM4-80GB MIG 1g.10gb``, the GPU-feature-discovery label), and the note when its GPU name stands
    for a family. The note was looked up on the text before a ``/``, which failed on CUDA's and GFD's names."""
    from lilou.api import rank_devices
    from lilou.caveats import ambiguity_notes

    return rank_devices([name])[0], ambiguity_notes([name])


def device_price(device: Device, prices: dict[str, float]) -> tuple[float | None, str | None]:
    """(USD per hour, where it comes from) of ``device``: its own line, or its parent GPU's price times the
    slice's share of compute slices; (None, None) when neither is priced."""
    if device.name in prices:
        return prices[device.name], "price file"
    if device.mig is not None and device.gpu in prices:
        from lilou.hardware import find_gpu

        spec = find_gpu(device.gpu)
        slices = spec.mig_profile(device.mig).compute_slices
        total = max(p.compute_slices for p in spec.mig_profiles)
        return prices[device.gpu] * slices / total, f"{device.gpu} x {slices}/{total} compute slices"
    return None, None
