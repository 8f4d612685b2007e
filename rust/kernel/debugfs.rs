// SPDX-License-Identifier: GPL-2.0

//! debugfs control files (placeholder; being written).
