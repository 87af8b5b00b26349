package vfs

import "golang.org/x/sys/unix"

// fdatasync on darwin is F_FULLFSYNC: plain fsync does not flush the drive's
// cache there.
func fdatasync(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	return err
}

// fallocate is not available; Allocate falls back to ftruncate.
func fallocate(fd int, off, n int64) error { return unix.EOPNOTSUPP }
