// SPDX-License-Identifier: GPL-2.0

//! The consumer (ULP) side of the RDMA core: rdma_cm and kernel verbs (placeholder; being
//! written).
