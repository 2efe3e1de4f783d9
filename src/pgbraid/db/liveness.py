"""Pooled connections that died while idle, and a lost connection said in words.

When PostgreSQL stops or restarts (or an administrator ends a backend), every idle
connection of the pool is already dead: its server sent a FATAL message (57P01)
and closed the socket. Nothing tells the pool until a request uses one. ``lost``
finds out before a request does, for the price of one ``poll`` system call: an
idle connection the server has said nothing to since its last request has
nothing to read; only one with something waiting (a FATAL, an end of stream, a
rare notice) is probed with a round trip.
"""

from __future__ import annotations

import select

import psycopg
from psycopg_pool import ConnectionPool

WORDS = {
    "57P01": "the server was shut down or restarted, or an administrator ended the connection",
    "57P02": "the server ended the connection after one of its processes crashed",
    "57P03": "the server is starting up, shutting down or recovering, and takes no "
             "connections now",
    "57P04": "the database was dropped",
    "57P05": "the connection was idle longer than the server's idle_session_timeout",
    "53100": "the server's disk is full",
    "53200": "the server is out of memory",
    "53300": "the server has no connection slot left (max_connections)",
}
"""What an OperationalError's SQLSTATE means, for a client (no server text: it may
name hosts, sockets or users)."""
CLASSES = {
    "08": "the connection to the server failed or was lost",
    "53": "the server is out of a resource",
    "57": "an operator or the server itself interrupted the connection",
    "58": "the server hit a system error (I/O)",
}
LOST = "the connection to the server was lost (it stopped, restarted or ended the connection)"


def in_words(exc: psycopg.Error) -> str:
    """What a connection-level error means, then its SQLSTATE when it has one."""
    code = exc.sqlstate
    if code is None:
        return LOST
    words = WORDS.get(code) or CLASSES.get(code[:2]) or "the server reported an operational error"
    return f"{words} (SQLSTATE {code})"


def lost(conn: psycopg.Connection) -> psycopg.Error | None:
    """Why an idle pooled connection cannot serve a request, or None when it can."""
    if conn.closed:
        return psycopg.OperationalError("the connection is closed")
    poller = select.poll()  # not select.select: a server process may hold fds over 1024
    poller.register(conn.fileno(), select.POLLIN)
    if not poller.poll(0):
        return None  # nothing waiting: the server has said nothing since the last request
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error as exc:
        return exc
    return None
