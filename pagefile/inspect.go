package pagefile

import (
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kdb-project/kdb/vfs"
)

// Inspection is what Inspect reads from a store without recovering it and
// without writing anything: the meta slots, db.redo, and both db.free files,
// with the decision Open would take.
type Inspection struct {
	PageSize int
	StoreID  string // hex
	DataSize int64  // bytes of db.data
	// DataSizeAfterRedo is the size db.data has once Open applied the
	// db.redo it would apply (Redo.RedoApplied): DataSize, or the end of
	// the highest page the batch writes if that is beyond it. A checkpoint
	// that grows db.data writes and syncs db.redo first, so a crash before
	// the grow leaves DataSize < Meta.PageCount pages and this at least
	// that: recovery pending, not a cut page file. A db.data shorter than
	// the page count of the meta db.redo follows (Redo.RedoBasePageCount)
	// was cut, and Open refuses to apply db.redo to it: this is DataSize.
	DataSizeAfterRedo int64
	Slots             [numMetaSlots]SlotInfo
	// Meta is the meta Open would use: the newest intact slot, or the meta
	// of a complete db.redo that Open would apply.
	Meta Meta
	// Redo is Open's report on db.redo (RedoApplied: Open would apply it;
	// RedoIgnored: why not).
	Redo Report
	// FreeFiles describes db.free and db.free.prev.
	FreeFiles []FreeFileInfo
	// TrustedFile names the free-list file Open would trust, "" if it
	// would scan; Reason says why db.free was not trusted.
	TrustedFile string
	Reason      string
	// Lies counts the pages the trusted file lists as free that are not
	// stamped free in db.data (each page it lists is read, as the proof
	// before use would read it): such a list would be dropped at the first
	// page that fails its proof. FirstLie is the first of them (0: none)
	// and LieReason what it holds.
	Lies      uint64
	FirstLie  PageID
	LieReason string
	// DamagedLies counts those of Lies whose image is damaged (checksum
	// or ID mismatch: ErrCorrupt) rather than holding another page: the
	// list may be right about them, and only the index can tell (a page
	// no tree reaches holds nothing).
	DamagedLies uint64
	// BeyondEnd counts those of Lies beyond the end of db.data (a page
	// file cut short): missing, not in use.
	BeyondEnd uint64
}

// SlotInfo describes one meta slot.
type SlotInfo struct {
	Intact bool
	// Unwritten: the slot is all zero, never written (a new store whose
	// second checkpoint has not run), not damaged. Err says so too.
	Unwritten bool
	Err       string
	Meta      Meta
}

// FreeFileInfo describes one free-list file.
type FreeFileInfo struct {
	Name        string
	Present     bool
	Intact      bool
	Err         string // why it is not intact
	StoreOK     bool   // written by this store
	ID          CheckpointID
	PageCount   uint64
	FreePages   uint64
	Ranges      []Range
	MatchesMeta bool // intact, same store, same ID and page count as Meta
}

// Inspect reads the store in dir read-only. It runs no recovery: a db.redo
// that Open would apply is overlaid in memory only.
func Inspect(fsys vfs.FS, dir string) (*Inspection, error) {
	f, rep, err := open(dir, Options{FS: fsys, ReadOnly: true}, true)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	in := &Inspection{
		PageSize: f.pageSize,
		StoreID:  hex.EncodeToString(f.storeID[:]),
		DataSize: f.dataSize,
		Meta:     f.Meta(),
		Redo:     *rep,
	}
	in.DataSizeAfterRedo = f.dataSize
	// need is 0 unless a db.redo is overlaid over a known older checkpoint.
	base, need := f.dataSize, int64(rep.RedoBasePageCount)*int64(f.pageSize)
	if base < need {
		// Read again, after the meta (see opener.redo).
		if size, err := f.data.Size(); err == nil {
			base = size
		}
	}
	if base >= need {
		f.mu.RLock()
		for id := range f.mu.overlay {
			in.DataSizeAfterRedo = max(in.DataSizeAfterRedo, (int64(id)+1)*int64(f.pageSize))
		}
		f.mu.RUnlock()
	}
	in.Redo.FreeListPath = ""
	hdr := fileHeader{pageSize: f.pageSize, storeID: f.storeID}
	buf := make([]byte, f.pageSize)
	for s := range in.Slots {
		off := int64(metaSlotPage+s) * int64(f.pageSize)
		if err := readFull(f.data, buf, off); err != nil {
			in.Slots[s].Err = err.Error()
			continue
		}
		if allZero(buf) {
			in.Slots[s] = SlotInfo{Unwritten: true, Err: "never written (all zero)"}
			continue
		}
		m, err := decodeMeta(buf, s, hdr, f.dataName, off)
		if err != nil {
			in.Slots[s].Err = err.Error()
			continue
		}
		in.Slots[s] = SlotInfo{Intact: true, Meta: m}
	}
	o := opener{f: f, dir: dir, rep: &Report{}}
	// A free-list file is read whole only up to the size the largest page
	// count in sight (either meta slot, db.data's own size) could need, as
	// Open bounds it (loadFreeFile): a damaged or sparse file of many GiB is
	// reported, not read into memory.
	pages := max(in.Meta.PageCount, uint64(f.dataSize/int64(f.pageSize)))
	for _, sl := range in.Slots {
		if sl.Intact {
			pages = max(pages, sl.Meta.PageCount)
		}
	}
	for _, name := range []string{freeFileName, freeFileName + prevSuffix} {
		path := filepath.Join(dir, name)
		fi := FreeFileInfo{Name: name}
		var b []byte
		size, _, err := fsys.Stat(path)
		if err == nil {
			if limit := freeFileLimit(pages); size > limit {
				err = fmt.Errorf("%s: size %d exceeds %d, the most a free list of %d pages needs", path, size, limit, pages)
			} else {
				b, err = vfs.ReadFile(fsys, path)
			}
		}
		switch {
		case isNotExist(err):
		case err != nil:
			fi.Present, fi.Err = true, err.Error()
		default:
			fi.Present = true
			ff, err := decodeFreeFile(b, path)
			if err != nil {
				fi.Err = err.Error()
				break
			}
			fi.Intact, fi.StoreOK = true, ff.storeID == f.storeID
			fi.ID, fi.PageCount, fi.FreePages, fi.Ranges = ff.id, ff.pageCount, ff.freePages, ff.ranges
			fi.MatchesMeta = fi.StoreOK && ff.id == in.Meta.ID && ff.pageCount == in.Meta.PageCount
		}
		in.FreeFiles = append(in.FreeFiles, fi)
	}
	var l *freeList
	l, in.TrustedFile, in.Reason = o.loadFreeList(in.Meta)
	if l == nil && in.Reason == "" {
		return nil, errors.New("pagefile: inspect: no free list and no reason")
	}
	if l != nil {
		var ioErr error
		f.mu.RLock()
		l.t.Ascend(func(r Range) bool {
			for id := r.Start; id < r.End(); id++ {
				if err := f.proveFree(id); err != nil {
					if !errors.Is(err, errNotFree) {
						ioErr = err
						return false
					}
					if in.Lies == 0 {
						in.FirstLie, in.LieReason = id, err.Error()
					}
					in.Lies++
					if errors.Is(err, ErrCorrupt) {
						in.DamagedLies++
					}
					if errors.Is(err, errBeyondEnd) {
						in.BeyondEnd++
					}
				}
			}
			return true
		})
		f.mu.RUnlock()
		if ioErr != nil {
			return nil, ioErr
		}
	}
	return in, nil
}

// String returns a one-line summary.
func (fi FreeFileInfo) String() string {
	if !fi.Present {
		return fi.Name + ": missing"
	}
	if !fi.Intact {
		return fi.Name + ": damaged: " + fi.Err
	}
	return fmt.Sprintf("%s: checkpoint %v, page count %d, %d free pages in %d ranges, matches meta: %v",
		fi.Name, fi.ID, fi.PageCount, fi.FreePages, len(fi.Ranges), fi.MatchesMeta)
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
