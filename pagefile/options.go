package pagefile

import (
	"fmt"
	"log/slog"

	"github.com/kdb-project/kdb/vfs"
)

// Options configures Open. The zero value is valid.
type Options struct {
	// FS is the file system. Default: vfs.OS. Tests pass a MemFS or errfs.
	FS vfs.FS
	// PageSize is the page size of a new store: a power of two in
	// [512, 65536]. It is used only when Open creates the store; an existing
	// store keeps its own. Default: 4096.
	PageSize int
	// StoreID is the ID of a new store (Open creating db.data): kdbtool
	// gives the one its journal's segments carry when it rebuilds a lost
	// db.data from them. Zero: random. An existing store keeps its own.
	StoreID [16]byte
	// ReadOnly opens without writing anything: a complete db.redo is
	// overlaid in memory instead of applied; Write, Allocate and Free
	// change pages in memory only (so a caller can replay its journal on
	// top), and checkpoints return ErrReadOnly. Open fails if the store
	// does not exist. Default: false.
	ReadOnly bool
	// ForceScan ignores db.free and always rebuilds the free list by a scan
	// of every page header (for benchmarks and kdbtool). Default: false.
	ForceScan bool
	// UnsafeNoSync skips the fsyncs of db.redo and db.data at a checkpoint
	// (db.free is still replaced atomically). A crash can then lose or tear
	// the checkpoint. Default: false.
	UnsafeNoSync bool
	// GrowBy is the preallocation step of db.data in bytes, rounded up to
	// whole pages. Default: 1/8 of the current file size, at least 1 MiB
	// and at most 1 GiB.
	GrowBy int64
	// Logger receives events that have no caller to report to (e.g. an
	// ignored db.redo). Default: discard.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.PageSize == 0 {
		o.PageSize = defaultPageSize
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate() error {
	if !validPageSize(o.PageSize) {
		return fmt.Errorf("pagefile: page size %d: want a power of two in [%d, %d]", o.PageSize, minPageSize, maxPageSize)
	}
	if o.GrowBy < 0 {
		return fmt.Errorf("pagefile: GrowBy %d < 0", o.GrowBy)
	}
	return nil
}

// growStep returns the preallocation step for a db.data of size bytes.
func (o Options) growStep(size int64, pageSize int) int64 {
	step := o.GrowBy
	if step == 0 {
		step = min(max(size/8, 1<<20), 1<<30)
	}
	ps := int64(pageSize)
	return (step + ps - 1) / ps * ps
}
