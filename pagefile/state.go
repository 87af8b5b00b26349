package pagefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kdb-project/kdb/internal/checksum"
	"github.com/kdb-project/kdb/vfs"
)

// ErrStale is returned by a ReadOnly handle when the store changed under it:
// a checkpoint of the process that writes the store ran since the handle
// was opened, and a read met its in-place writes (a page of a later
// checkpoint, a page torn mid-write, or bytes that no longer fit). It is not
// damage: the read-only operation is to be retried on a fresh open.
var ErrStale = errors.New("pagefile: the store changed under the read-only handle (a checkpoint ran); reopen")

// State identifies the checkpoint state of a store on disk: what a
// checkpoint changes, in the order it changes it. Two equal States read
// before and after a read-only operation mean that no checkpoint wrote
// db.redo or db.data in between; they are compared with ==.
//
// A checkpoint writes the db.redo header first (RedoHead changes), then the
// images and the trailer (RedoTail and RedoSize change), then db.data in
// place and the meta slot last (a Slot changes), then the applied mark
// (RedoTail changes). So every in-place write of db.data happens while the
// State differs from any State read before the checkpoint began.
type State struct {
	Slots    [numMetaSlots]uint64 // xxhash64 of each meta slot page as read (0: unreadable)
	RedoSize int64                // -1: no db.redo
	RedoHead uint64               // xxhash64 of db.redo's first redoHeaderSize bytes
	RedoTail [redoTrailerSize]byte
}

// ReadState reads the State of the store in dir: the two meta slots, and
// db.redo's size, header and trailer. It reads a few pages and writes
// nothing.
func ReadState(fsys vfs.FS, dir string) (State, error) {
	var s State
	data, err := fsys.OpenFile(filepath.Join(dir, dataFileName), os.O_RDONLY, 0)
	if err != nil {
		return s, fmt.Errorf("pagefile: state of %s: %w", dir, err)
	}
	defer data.Close()
	hb := make([]byte, hdrSize)
	if err := readFull(data, hb, 0); err != nil {
		return s, fmt.Errorf("pagefile: state of %s: header: %w", dir, err)
	}
	h, err := decodeHeader(hb, filepath.Join(dir, dataFileName))
	if err != nil {
		return s, err
	}
	buf := make([]byte, h.pageSize)
	for i := range s.Slots {
		if readFull(data, buf, int64(metaSlotPage+i)*int64(h.pageSize)) == nil {
			s.Slots[i] = checksum.Sum64(buf)
		}
	}
	s.RedoSize = -1
	r, err := fsys.OpenFile(filepath.Join(dir, redoFileName), os.O_RDONLY, 0)
	if isNotExist(err) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("pagefile: state of %s: %w", dir, err)
	}
	defer r.Close()
	if s.RedoSize, err = r.Size(); err != nil {
		return s, fmt.Errorf("pagefile: state of %s: size of db.redo: %w", dir, err)
	}
	rb := make([]byte, redoHeaderSize)
	if n, _ := r.ReadAt(rb, 0); n > 0 {
		s.RedoHead = checksum.Sum64(rb[:n])
	}
	if s.RedoSize >= redoTrailerSize {
		_, _ = r.ReadAt(s.RedoTail[:], s.RedoSize-redoTrailerSize)
	}
	return s, nil
}

// Changed reports whether the store's State on disk differs from the one a
// ReadOnly handle read before it opened (a checkpoint ran since). An error
// reading the State counts as a change. A handle that is not ReadOnly
// holds the lock: nothing changes under it, and Changed is false; so it is
// when the State could not be read at open (the damage is then reported).
func (f *File) Changed() bool {
	if !f.opts.ReadOnly || !f.roStateOK {
		return false
	}
	s, err := ReadState(f.fs, filepath.Dir(f.dataName))
	return err != nil || s != f.roState
}

// staleOr returns err, or, for a ReadOnly handle whose store changed since
// it opened, an ErrStale naming err: a read that failed while a checkpoint
// wrote in place is no proof of damage.
func (f *File) staleOr(err error) error {
	if err == nil || !errors.Is(err, ErrCorrupt) || !f.Changed() {
		return err
	}
	return fmt.Errorf("%w: %v", ErrStale, err)
}

// newerPageErr is the error of a ReadOnly read that met page id (at off of
// db.data) written by checkpoint ck, newer than the handle's meta seq. While
// the store's State differs from the one read at open, a checkpoint of the
// writing process wrote it in place: ErrStale, retry. While it does not,
// no checkpoint has written in place since (State), and the page belongs
// to a checkpoint whose meta slot is lost (damaged, with no db.redo to
// restore it): ErrCorrupt, which every retry would meet again (an outside
// tester's flipped byte in the newest meta slot and a removed db.redo:
// twenty "store changed" retries, reported as an I/O error, exit 3).
func (f *File) newerPageErr(off int64, id PageID, ck, seq uint64) error {
	if f.roStateOK && !f.Changed() {
		return fmt.Errorf("%w: %s@%d: %v written by checkpoint %d, newer than the meta's %d, while no checkpoint ran: the meta slot of that checkpoint is lost (damaged, and no db.redo restores it)", ErrCorrupt, f.dataName, off, id, ck, seq)
	}
	return fmt.Errorf("%w: %s@%d: %v written by checkpoint %d, after this handle's %d", ErrStale, f.dataName, off, id, ck, seq)
}

// readSnapshotLocked is Read of a clean page for a ReadOnly handle: another
// process may rewrite any page in place at its next checkpoint, so the page
// is copied out of the mapping (or read) and checked on every read, and a
// page that a checkpoint newer than this handle's meta wrote is ErrStale:
// the handle's tree cannot refer to it. Verified copies are kept (up to
// roCachePages) and served again.
//
// The caller must hold f.mu (read).
func (f *File) readSnapshotLocked(id PageID) (PageType, []byte, error) {
	f.roCache.Lock()
	b := f.roCache.m[id]
	f.roCache.Unlock()
	if b != nil {
		plen := int(binary.LittleEndian.Uint32(b[pgPayloadLen:]))
		return PageType(b[pgType]), b[pageHeaderSize : pageHeaderSize+plen : pageHeaderSize+plen], nil
	}
	ps := int64(f.pageSize)
	off := int64(id) * ps
	b = make([]byte, ps)
	if v := f.mu.view; off+ps <= v.valid.Load() {
		copy(b, v.mm[off:off+ps])
	} else if err := readFull(f.data, b, off); err != nil {
		return 0, nil, f.staleOr(fmt.Errorf("%w: %s@%d: %v: %w", ErrCorrupt, f.dataName, off, id, err))
	}
	h, err := decodePage(b, id, f.dataName, off)
	if err != nil {
		return 0, nil, f.staleOr(err)
	}
	if h.checkpoint > f.mu.meta.Seq {
		return 0, nil, f.newerPageErr(off, id, h.checkpoint, f.mu.meta.Seq)
	}
	f.roCache.Lock()
	if f.roCache.m == nil {
		f.roCache.m = make(map[PageID][]byte)
	}
	if len(f.roCache.m) >= roCachePages {
		for k := range f.roCache.m { // evict one, at random
			delete(f.roCache.m, k)
			break
		}
	}
	f.roCache.m[id] = b
	f.roCache.Unlock()
	return h.typ, b[pageHeaderSize : pageHeaderSize+h.payloadLen : pageHeaderSize+h.payloadLen], nil
}

// roCachePages bounds the verified page copies a ReadOnly handle keeps. A
// copy stays right for the handle's snapshot whatever a checkpoint writes
// later, so it is served again without a copy or a checksum.
const roCachePages = 4096
