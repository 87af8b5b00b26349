package pagefile

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/kdb-project/kdb/internal/checksum"
)

// PageID is the position of a page in db.data: page i starts at byte
// i*PageSize. 0 is never a valid data page and serves as nil.
type PageID uint64

// String returns "page 42".
func (id PageID) String() string { return "page " + strconv.FormatUint(uint64(id), 10) }

// PageType is the type byte of a page header. Types 1..15 belong to pagefile;
// the index uses types >= 16, which are opaque here. 0 is never valid.
type PageType uint8

const (
	// PageFree marks a page on the free list; a checkpoint stamps every
	// freed page with it, so that a scan can find it.
	PageFree PageType = 1
)

// Range is a run of Len consecutive pages starting at Start.
type Range struct {
	Start PageID
	Len   uint64
}

// End returns the first page after the range.
func (r Range) End() PageID { return r.Start + PageID(r.Len) }

// pageHeader is a decoded page header (FORMAT.md §2.4).
type pageHeader struct {
	id         PageID
	typ        PageType
	payloadLen int
	checkpoint uint64
}

// encodePage fills buf (one whole page) with the header and payload and
// seals it with its checksum. Bytes after the payload are zeroed.
func encodePage(buf []byte, id PageID, typ PageType, payload []byte, seq uint64) {
	encodePageWithSum(buf, id, typ, payload, seq, 0)
	binary.LittleEndian.PutUint64(buf[pgChecksum:], checksum.Sum64(buf[8:]))
}

// encodePageWithSum is encodePage for a page whose checksum is already
// known (the same page encoded before): it skips the hashing.
func encodePageWithSum(buf []byte, id PageID, typ PageType, payload []byte, seq, sum uint64) {
	clear(buf[:pageHeaderSize])
	binary.LittleEndian.PutUint64(buf[pgID:], uint64(id))
	buf[pgType] = byte(typ)
	binary.LittleEndian.PutUint32(buf[pgPayloadLen:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(buf[pgCheckpoint:], seq)
	n := copy(buf[pageHeaderSize:], payload)
	clear(buf[pageHeaderSize+n:])
	binary.LittleEndian.PutUint64(buf[pgChecksum:], sum)
}

// decodePage checks one whole page image read from position want of file
// name at byte offset off: its checksum, its ID and its header fields.
func decodePage(b []byte, want PageID, name string, off int64) (pageHeader, error) {
	if len(b) < minPageSize || len(b) > maxPageSize {
		return pageHeader{}, fmt.Errorf("%w: %s@%d: %v: short page (%d bytes)", ErrCorrupt, name, off, want, len(b))
	}
	if sum := checksum.Sum64(b[8:]); sum != binary.LittleEndian.Uint64(b[pgChecksum:]) {
		return pageHeader{}, fmt.Errorf("%w: %s@%d: %v: checksum mismatch", ErrCorrupt, name, off, want)
	}
	return decodePageHeader(b, want, name, off)
}

// decodePageHeader checks the header fields of a page whose checksum is
// already verified (or is being fuzzed).
func decodePageHeader(b []byte, want PageID, name string, off int64) (pageHeader, error) {
	if len(b) < pageHeaderSize {
		return pageHeader{}, fmt.Errorf("%w: %s@%d: %v: short page header", ErrCorrupt, name, off, want)
	}
	h := pageHeader{
		id:         PageID(binary.LittleEndian.Uint64(b[pgID:])),
		typ:        PageType(b[pgType]),
		payloadLen: int(binary.LittleEndian.Uint32(b[pgPayloadLen:])),
		checkpoint: binary.LittleEndian.Uint64(b[pgCheckpoint:]),
	}
	switch {
	case h.id != want:
		return h, fmt.Errorf("%w: %s@%d: %v claims id %d", ErrCorrupt, name, off, want, uint64(h.id))
	case h.typ == 0:
		return h, fmt.Errorf("%w: %s@%d: %v: type 0", ErrCorrupt, name, off, want)
	case b[pgFlags] != 0 || binary.LittleEndian.Uint16(b[pgReserved:]) != 0:
		return h, fmt.Errorf("%w: %s@%d: %v: reserved header bytes not zero", ErrCorrupt, name, off, want)
	case h.payloadLen > len(b)-pageHeaderSize:
		return h, fmt.Errorf("%w: %s@%d: %v: payload length %d exceeds page", ErrCorrupt, name, off, want, h.payloadLen)
	}
	return h, nil
}
