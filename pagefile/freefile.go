package pagefile

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/kdb-project/kdb/internal/checksum"
)

// CheckpointID identifies one checkpoint: its sequence number and 8 random
// bytes from crypto/rand, so that an ID is never reused even when a failed
// checkpoint's sequence number is taken again.
type CheckpointID struct {
	Seq  uint64
	Rand [8]byte
}

// String returns "<seq>-<16 hex digits>", e.g. "7-0a1b2c3d4e5f6071".
func (id CheckpointID) String() string {
	return strconv.FormatUint(id.Seq, 10) + "-" + hex.EncodeToString(id.Rand[:])
}

// newCheckpointID returns a fresh ID with sequence seq.
func newCheckpointID(seq uint64) CheckpointID {
	id := CheckpointID{Seq: seq}
	_, _ = rand.Read(id.Rand[:]) // crypto/rand.Read never fails (Go 1.24+)
	return id
}

// freeFile is the decoded db.free.
type freeFile struct {
	storeID   [16]byte
	id        CheckpointID
	pageCount uint64
	ranges    []Range // sorted, coalesced, within [FirstDataPage, pageCount)
	freePages uint64
}

// encodeFreeFile encodes db.free for the free list l at checkpoint id.
func encodeFreeFile(storeID [16]byte, id CheckpointID, pageCount uint64, l *freeList) []byte {
	n := l.t.Len()
	buf := make([]byte, freeHeaderSize+n*freeRangeSize)
	binary.LittleEndian.PutUint32(buf[freeMagicOff:], freeMagic)
	binary.LittleEndian.PutUint32(buf[freeVersion:], FormatVersion)
	copy(buf[freeStoreID:], storeID[:])
	binary.LittleEndian.PutUint64(buf[freeSeq:], id.Seq)
	copy(buf[freeRand:], id.Rand[:])
	binary.LittleEndian.PutUint64(buf[freePageCount:], pageCount)
	binary.LittleEndian.PutUint64(buf[freeRangeCount:], uint64(n))
	binary.LittleEndian.PutUint64(buf[freeFreePages:], l.total)
	off := freeHeaderSize
	l.t.Ascend(func(r Range) bool {
		binary.LittleEndian.PutUint64(buf[off+freeRangeStart:], uint64(r.Start))
		binary.LittleEndian.PutUint64(buf[off+freeRangeLen:], r.Len)
		off += freeRangeSize
		return true
	})
	binary.LittleEndian.PutUint64(buf[freeChecksum:], checksum.Sum64(buf[8:]))
	return buf
}

// decodeFreeFile decodes and checks db.free (the whole file, read from
// name). It checks the structure only; whether the IDs match the meta is
// the caller's decision.
func decodeFreeFile(b []byte, name string) (freeFile, error) {
	if len(b) < freeHeaderSize {
		return freeFile{}, fmt.Errorf("%w: %s@0: truncated (%d bytes)", ErrCorrupt, name, len(b))
	}
	if binary.LittleEndian.Uint32(b[freeMagicOff:]) != freeMagic {
		return freeFile{}, fmt.Errorf("%w: %s@%d: bad magic", ErrCorrupt, name, freeMagicOff)
	}
	if v := binary.LittleEndian.Uint32(b[freeVersion:]); v != FormatVersion {
		return freeFile{}, fmt.Errorf("%w: %s@%d: version %d, want %d", ErrVersionMismatch, name, freeVersion, v, FormatVersion)
	}
	n := binary.LittleEndian.Uint64(b[freeRangeCount:])
	if n > uint64(len(b)) || uint64(len(b)) != freeHeaderSize+n*freeRangeSize {
		return freeFile{}, fmt.Errorf("%w: %s@%d: %d ranges do not fit a %d-byte file", ErrCorrupt, name, freeRangeCount, n, len(b))
	}
	if checksum.Sum64(b[8:]) != binary.LittleEndian.Uint64(b[freeChecksum:]) {
		return freeFile{}, fmt.Errorf("%w: %s@0: checksum mismatch", ErrCorrupt, name)
	}
	f := freeFile{
		pageCount: binary.LittleEndian.Uint64(b[freePageCount:]),
		freePages: binary.LittleEndian.Uint64(b[freeFreePages:]),
		ranges:    make([]Range, 0, n),
	}
	if f.pageCount > maxPageCount(minPageSize) {
		return freeFile{}, fmt.Errorf("%w: %s@%d: page count %d", ErrCorrupt, name, freePageCount, f.pageCount)
	}
	copy(f.storeID[:], b[freeStoreID:])
	f.id.Seq = binary.LittleEndian.Uint64(b[freeSeq:])
	copy(f.id.Rand[:], b[freeRand:])
	next := FirstDataPage // lowest start allowed for the next range
	var total uint64
	for i := uint64(0); i < n; i++ {
		off := freeHeaderSize + int(i)*freeRangeSize
		r := Range{
			Start: PageID(binary.LittleEndian.Uint64(b[off+freeRangeStart:])),
			Len:   binary.LittleEndian.Uint64(b[off+freeRangeLen:]),
		}
		if r.Len == 0 || r.Start < next || r.Len > f.pageCount || uint64(r.Start) > f.pageCount-r.Len {
			return freeFile{}, fmt.Errorf("%w: %s@%d: range %d+%d out of order, empty, touching or beyond page count %d", ErrCorrupt, name, off, uint64(r.Start), r.Len, f.pageCount)
		}
		f.ranges = append(f.ranges, r)
		next = r.End() + 1 // coalesced: the next range may not touch this one
		total += r.Len
	}
	if total != f.freePages {
		return freeFile{}, fmt.Errorf("%w: %s@%d: ranges sum to %d pages, header says %d", ErrCorrupt, name, freeFreePages, total, f.freePages)
	}
	return f, nil
}

// toFreeList builds the in-memory free list from decoded, checked ranges.
func (f *freeFile) toFreeList() *freeList {
	l := newFreeList()
	for _, r := range f.ranges {
		l.t.ReplaceOrInsert(r)
	}
	l.total = f.freePages
	return l
}
