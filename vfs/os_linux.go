package vfs

import "golang.org/x/sys/unix"

func fdatasync(fd int) error { return unix.Fdatasync(fd) }

// fallocate reserves [off, off+n) and grows the file to at least off+n.
func fallocate(fd int, off, n int64) error { return unix.Fallocate(fd, 0, off, n) }

// StartWriteback starts the write-back of [off, off+n) and returns without
// waiting (vfs.WritebackStarter). With SYNC_FILE_RANGE_WRITE alone the
// kernel only submits the dirty pages: it neither waits for them nor checks
// or advances the file's write-back error, which the next fdatasync reports.
func (f *osFile) StartWriteback(off, n int64) error {
	return control(f.f, func(fd int) error {
		return retryEINTR(func() error { return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE) })
	})
}
