// SPDX-License-Identifier: GPL-2.0

//! Kernel TCP sockets for in-kernel protocols (placeholder; being written).
