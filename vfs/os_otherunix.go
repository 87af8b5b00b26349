//go:build unix && !linux && !darwin

package vfs

import "golang.org/x/sys/unix"

func fdatasync(fd int) error { return unix.Fsync(fd) }

// fallocate is not used here; Allocate falls back to ftruncate.
func fallocate(fd int, off, n int64) error { return unix.EOPNOTSUPP }
