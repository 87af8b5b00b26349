package pagefile

import (
	"errors"
	"fmt"
	"io/fs"
)

// Errors. Errors about bytes on disk wrap ErrCorrupt and name the file and
// offset.
var (
	// ErrCorrupt reports damaged or inconsistent bytes read from disk.
	ErrCorrupt = errors.New("pagefile: corrupt")
	// ErrVersionMismatch reports a db.data written by an unknown FormatVersion.
	ErrVersionMismatch = errors.New("pagefile: format version mismatch")
	// ErrDoubleFree reports a Free of a page that is already free.
	ErrDoubleFree = errors.New("pagefile: double free")
	// ErrFailed is the sticky failure of a handle after a write or sync
	// error; it wraps the cause. Nothing is retried.
	ErrFailed = errors.New("pagefile: failed")
	// ErrReadOnly reports a mutation on a handle opened with ReadOnly.
	ErrReadOnly = errors.New("pagefile: read-only")
	// ErrClosed reports use of a closed handle.
	ErrClosed = errors.New("pagefile: closed")
	// ErrOutOfRange reports a page ID outside [FirstDataPage, PageCount),
	// or a payload larger than PayloadSize. It is a caller error.
	ErrOutOfRange = errors.New("pagefile: page out of range")
)

// opErr is the error of op on the file name: err, named "pagefile: op
// name: err" unless err names that file already (an *fs.PathError does,
// with its own op), so that the operator reads each path once.
func opErr(op, name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == name {
		return fmt.Errorf("pagefile: %w", err)
	}
	return fmt.Errorf("pagefile: %s %s: %w", op, name, err)
}
