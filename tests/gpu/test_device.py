"""Device on a real GPU: the queries (name, capability, memory, UUID, PCI bus id, attributes) and a bad ordinal."""

from __future__ import annotations

import pytest

from rawcuda import Device
from rawcuda.ffi.attributes import DeviceAttribute

pytestmark = pytest.mark.gpu


def test_device_queries() -> None:
    dev = Device(0)
    assert Device.count() >= 1 and dev == Device(0) and hash(dev) == hash(Device(0))
    assert dev.name and dev.compute_capability >= (7, 0) and dev.total_memory > 1 << 30
    assert dev.uuid.int != 0 and ":" in dev.pci_bus_id
    assert dev.attribute(DeviceAttribute.WARP_SIZE) == 32 == dev.attributes()["WARP_SIZE"]
    assert dev.multiprocessor_count > 0 and dev.max_threads_per_block == 1024
    with pytest.raises(ValueError, match="no GPU with ordinal 99"):
        Device(99)
