package bench

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropFileCache asks the kernel to drop the clean cached pages of the file
// at path (posix_fadvise POSIX_FADV_DONTNEED), after syncing it so that no
// page is dirty. It needs no privilege and touches no other file.
func dropFileCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
