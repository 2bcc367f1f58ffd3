#!/usr/bin/env python3
"""Prints NVML's critical Xid events of GPU 0 as JSON lines for SECONDS.

NVML is loaded with ctypes (no nvml.h on the GPU machine). A line with
"error" says that the events cannot be read here, and why."""
import ctypes
import json
import sys
import time


class EventData(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("eventType", ctypes.c_ulonglong),
                ("eventData", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    out = lambda **kw: print(json.dumps(dict(t=time.time(), **kw)), flush=True)
    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        out(error=f"dlopen: {e}")
        return
    rc = nv.nvmlInit_v2()
    if rc:
        out(error="nvmlInit", rc=rc)
        return
    dev = ctypes.c_void_p()
    rc = nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
    es = ctypes.c_void_p()
    rc = rc or nv.nvmlEventSetCreate(ctypes.byref(es))
    if rc:
        out(error="handle/eventset", rc=rc)
        return
    kXid = 0x8  # nvmlEventTypeXidCriticalError
    rc = nv.nvmlDeviceRegisterEvents(dev, ctypes.c_ulonglong(kXid), es)
    out(event="registered", rc=rc)
    if rc:
        return
    end = time.time() + seconds
    data = EventData()
    while time.time() < end:
        rc = nv.nvmlEventSetWait_v2(es, ctypes.byref(data), 200)
        if rc == 0:
            out(event="xid", xid=data.eventData, type=data.eventType)
        elif rc != 10:  # NVML_ERROR_TIMEOUT
            out(event="wait_error", rc=rc)
            time.sleep(0.2)
    nv.nvmlEventSetFree(es)
    nv.nvmlShutdown()


if __name__ == "__main__":
    main()
