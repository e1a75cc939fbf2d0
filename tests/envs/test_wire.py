"""Length-prefixed channel messages (envs.wire)."""

from __future__ import annotations

import os
import select
import socket
import threading

import pytest

from envs.wire import Channel, new_eventfd


@pytest.mark.timeout(10)
def test_small_and_large_messages_round_trip():
    a, b = socket.socketpair()
    try:
        left, right = Channel(a.fileno()), Channel(b.fileno())
        left.send(b"s")
        assert right.recv() == b"s"
        left.send(b"")
        assert right.recv() == b""
        big = os.urandom(3 << 20)  # far larger than the socket buffer: a reader must drain it
        sender = threading.Thread(target=left.send, args=(big,))
        sender.start()
        assert right.recv() == big
        sender.join()
    finally:
        a.close()
        b.close()


@pytest.mark.timeout(10)
def test_back_to_back_messages_are_kept_for_the_next_recv():
    r, w = os.pipe()
    try:
        out, inp = Channel(w), Channel(r)
        out.send(b"first")
        out.send(b"second")
        assert not inp.buffered()
        assert inp.recv() == b"first"  # one read took both
        assert inp.buffered()
        assert inp.recv() == b"second"
        assert not inp.buffered()
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.timeout(10)
def test_closed_peer_raises_eof_and_broken_pipe():
    r, w = os.pipe()
    os.close(w)
    try:
        with pytest.raises(EOFError):
            Channel(r).recv()
    finally:
        os.close(r)
    r, w = os.pipe()
    os.close(r)
    try:
        with pytest.raises(BrokenPipeError):
            Channel(w).send(b"x")
    finally:
        os.close(w)


@pytest.mark.timeout(10)
def test_eventfd_signals_every_message_small_or_large():
    a, b = socket.socketpair()
    to_b, to_a = new_eventfd(), new_eventfd()
    try:
        left = Channel(a.fileno(), send_efd=to_b, recv_efd=to_a)
        right = Channel(b.fileno(), send_efd=to_a, recv_efd=to_b)
        assert right.wait_fd == to_b
        poller = select.poll()
        poller.register(right.wait_fd, select.POLLIN)
        assert poller.poll(0) == []
        left.send(b"s")
        assert poller.poll(0)  # the signal, not the socket, wakes the receiver
        assert right.recv() == b"s"
        assert poller.poll(0) == [] and not right.buffered()
        big = os.urandom(1 << 20)  # signalled before it is written
        sender = threading.Thread(target=left.send, args=(big,))
        sender.start()
        assert poller.poll(5000)
        assert right.recv() == big
        sender.join()
        left.send(b"one")
        left.send(b"two")
        assert right.recv() == b"one"
        assert right.buffered() and poller.poll(0) == []  # signalled, no longer pollable
        assert right.recv() == b"two"
        assert not right.buffered()
        right.send(b"back")
        assert left.recv() == b"back"
    finally:
        for fd in (to_a, to_b):
            os.close(fd)
        a.close()
        b.close()
