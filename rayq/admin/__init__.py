"""Administration: ``Admin`` (topics, groups, offsets, message queries, broker status)
and ``health`` (the checks behind ``rayq health``)."""

from rayq.admin.admin import Admin

__all__ = ["Admin"]
