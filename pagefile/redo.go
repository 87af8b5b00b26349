package pagefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kdb-project/kdb/internal/checksum"
)

// redoHeader is the decoded header and position table of db.redo.
type redoHeader struct {
	storeID   [16]byte
	id        CheckpointID
	pageSize  int
	pageCount uint64   // the new meta's page count
	positions []uint64 // page indexes in db.data, strictly increasing
}

// redoSize returns the size of a db.redo holding count images.
func redoSize(count, pageSize int) int64 {
	return int64(redoHeaderSize) + int64(count)*(8+int64(pageSize)) + redoTrailerSize
}

// encodeRedoHead returns the header and position table of a batch.
func encodeRedoHead(storeID [16]byte, id CheckpointID, pageSize int, pageCount uint64, positions []uint64) []byte {
	buf := make([]byte, redoHeaderSize+8*len(positions))
	binary.LittleEndian.PutUint32(buf[redoMagicOff:], redoMagic)
	binary.LittleEndian.PutUint32(buf[redoVersion:], FormatVersion)
	copy(buf[redoStoreID:], storeID[:])
	binary.LittleEndian.PutUint64(buf[redoSeq:], id.Seq)
	copy(buf[redoRand:], id.Rand[:])
	binary.LittleEndian.PutUint32(buf[redoPageSize:], uint32(pageSize))
	binary.LittleEndian.PutUint64(buf[redoCount:], uint64(len(positions)))
	binary.LittleEndian.PutUint64(buf[redoPageCount:], pageCount)
	for i, p := range positions {
		binary.LittleEndian.PutUint64(buf[redoHeaderSize+8*i:], p)
	}
	return buf
}

// redoTrailer returns the trailer sealing head and the images: the
// checksum is xxhash64 of the head followed by the xxhash64 of each image
// (FORMAT.md §2.6), so it can be computed in one streaming
// pass without holding the batch.
func redoTrailer(head []byte, imageSums []byte) []byte {
	t := make([]byte, redoTrailerSize)
	binary.LittleEndian.PutUint32(t[trailerMagicOff:], redoTrailerMagic)
	binary.LittleEndian.PutUint64(t[trailerChecksum:], checksum.Seeded2(0, head, imageSums))
	return t
}

// redoAlreadyApplied reports, from the header and trailer alone, whether
// db.redo (size bytes) is the batch of checkpoint id marked applied: then
// db.data holds it durably and the batch need not be read. Any doubt gives
// false (and the batch is checked and re-applied as usual).
func redoAlreadyApplied(r io.ReaderAt, size int64, storeID [16]byte, id CheckpointID) bool {
	if size < redoHeaderSize+redoTrailerSize {
		return false
	}
	hb := make([]byte, redoHeaderSize)
	tb := make([]byte, redoTrailerSize)
	if _, err := r.ReadAt(hb, 0); err != nil {
		return false
	}
	if _, err := r.ReadAt(tb, size-redoTrailerSize); err != nil {
		return false
	}
	ps := int(binary.LittleEndian.Uint32(hb[redoPageSize:]))
	count := binary.LittleEndian.Uint64(hb[redoCount:])
	var sid [16]byte
	copy(sid[:], hb[redoStoreID:])
	var rnd [8]byte
	copy(rnd[:], hb[redoRand:])
	return binary.LittleEndian.Uint32(hb[redoMagicOff:]) == redoMagic &&
		validPageSize(ps) && count <= uint64(size)/uint64(ps) && redoSize(int(count), ps) == size &&
		sid == storeID && binary.LittleEndian.Uint64(hb[redoSeq:]) == id.Seq && rnd == id.Rand &&
		binary.LittleEndian.Uint32(tb[trailerMagicOff:]) == redoTrailerMagic &&
		binary.LittleEndian.Uint32(tb[trailerApplied:]) == redoAppliedMagic
}

// errRedoIncomplete marks a db.redo that is not a complete batch (empty,
// short, torn, or failing its checksum): it is ignored, not an error,
// because a crash while writing it leaves db.data untouched.
var errRedoIncomplete = errors.New("pagefile: db.redo incomplete")

// redoChunk is how many bytes of images decodeRedo reads at once.
const redoChunk = 64 << 10

// decodeRedo reads and checks db.redo (size bytes readable through r). An
// incomplete batch gives an error wrapping errRedoIncomplete; a complete
// batch whose contents are inconsistent gives ErrCorrupt. It reads the file
// once; memory is bounded by the file size.
func decodeRedo(r io.ReaderAt, size int64, name string) (redoHeader, error) {
	incomplete := func(format string, args ...any) (redoHeader, error) {
		return redoHeader{}, fmt.Errorf("%w: %s: "+format, append([]any{errRedoIncomplete, name}, args...)...)
	}
	if size < redoHeaderSize+redoTrailerSize {
		return incomplete("%d bytes", size)
	}
	hb := make([]byte, redoHeaderSize)
	if _, err := r.ReadAt(hb, 0); err != nil {
		return redoHeader{}, fmt.Errorf("pagefile: read %s@0: %w", name, err)
	}
	if binary.LittleEndian.Uint32(hb[redoMagicOff:]) != redoMagic {
		return incomplete("bad magic at offset %d", redoMagicOff)
	}
	h := redoHeader{
		pageSize:  int(binary.LittleEndian.Uint32(hb[redoPageSize:])),
		pageCount: binary.LittleEndian.Uint64(hb[redoPageCount:]),
	}
	copy(h.storeID[:], hb[redoStoreID:])
	h.id.Seq = binary.LittleEndian.Uint64(hb[redoSeq:])
	copy(h.id.Rand[:], hb[redoRand:])
	count := binary.LittleEndian.Uint64(hb[redoCount:])
	if !validPageSize(h.pageSize) || count > uint64(size)/uint64(h.pageSize) || redoSize(int(count), h.pageSize) != size {
		return incomplete("count %d, page size %d do not match a %d-byte file", count, h.pageSize, size)
	}
	head := make([]byte, redoHeaderSize+8*int(count))
	copy(head, hb)
	if _, err := r.ReadAt(head[redoHeaderSize:], redoHeaderSize); err != nil {
		return redoHeader{}, fmt.Errorf("pagefile: read %s@%d: %w", name, redoHeaderSize, err)
	}
	sums := make([]byte, 8*int(count))
	per := max(1, redoChunk/h.pageSize)
	buf := make([]byte, min(per, int(count))*h.pageSize)
	base := int64(len(head))
	for i := 0; i < int(count); i += per {
		n := min(per, int(count)-i)
		chunk := buf[:n*h.pageSize]
		if _, err := r.ReadAt(chunk, base+int64(i)*int64(h.pageSize)); err != nil {
			return redoHeader{}, fmt.Errorf("pagefile: read %s@%d: %w", name, base+int64(i)*int64(h.pageSize), err)
		}
		for j := 0; j < n; j++ {
			putSum(sums[8*(i+j):], chunk[j*h.pageSize:(j+1)*h.pageSize])
		}
	}
	tb := make([]byte, redoTrailerSize)
	toff := size - redoTrailerSize
	if _, err := r.ReadAt(tb, toff); err != nil {
		return redoHeader{}, fmt.Errorf("pagefile: read %s@%d: %w", name, toff, err)
	}
	if binary.LittleEndian.Uint32(tb[trailerMagicOff:]) != redoTrailerMagic ||
		binary.LittleEndian.Uint64(tb[trailerChecksum:]) != checksum.Seeded2(0, head, sums) {
		return incomplete("trailer at offset %d does not match", toff)
	}
	// The batch is complete and intact: from here on, an inconsistency is
	// corruption, not a torn write.
	if v := binary.LittleEndian.Uint32(hb[redoVersion:]); v != FormatVersion {
		return redoHeader{}, fmt.Errorf("%w: %s@%d: version %d, want %d", ErrVersionMismatch, name, redoVersion, v, FormatVersion)
	}
	if h.pageCount < uint64(FirstDataPage) || h.pageCount > maxPageCount(h.pageSize) {
		return redoHeader{}, fmt.Errorf("%w: %s@%d: page count %d", ErrCorrupt, name, redoPageCount, h.pageCount)
	}
	h.positions = make([]uint64, count)
	metas := 0
	for i := range h.positions {
		p := binary.LittleEndian.Uint64(head[redoHeaderSize+8*i:])
		off := redoHeaderSize + 8*i
		switch {
		case i > 0 && p <= h.positions[i-1]:
			return redoHeader{}, fmt.Errorf("%w: %s@%d: position %d not increasing", ErrCorrupt, name, off, p)
		case p == metaSlotPage+h.id.Seq%numMetaSlots:
			metas++
		case p < uint64(FirstDataPage) || p >= h.pageCount:
			return redoHeader{}, fmt.Errorf("%w: %s@%d: position %d outside [%d, %d)", ErrCorrupt, name, off, p, FirstDataPage, h.pageCount)
		}
		h.positions[i] = p
	}
	if metas != 1 {
		return redoHeader{}, fmt.Errorf("%w: %s@%d: batch holds %d meta slot images for seq %d, want 1", ErrCorrupt, name, redoHeaderSize, metas, h.id.Seq)
	}
	return h, nil
}

// imageOffset returns the offset in db.redo of image i.
func (h *redoHeader) imageOffset(i int) int64 {
	return int64(redoHeaderSize) + 8*int64(len(h.positions)) + int64(i)*int64(h.pageSize)
}

// putSum stores the xxhash64 of image at dst.
func putSum(dst, image []byte) {
	binary.LittleEndian.PutUint64(dst, checksum.Sum64(image))
}
