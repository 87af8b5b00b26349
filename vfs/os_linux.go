package vfs

import "golang.org/x/sys/unix"

func fdatasync(fd int) error { return unix.Fdatasync(fd) }

// fallocate reserves [off, off+n) and grows the file to at least off+n.
func fallocate(fd int, off, n int64) error { return unix.Fallocate(fd, 0, off, n) }
