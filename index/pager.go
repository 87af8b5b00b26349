package index

import "github.com/kdb-project/kdb/pagefile"

// pager is what the index needs from the page file. *pagefile.File provides
// it through filePager; tests may substitute a fake. The method signatures
// are those of the pagefile contract.
type pager interface {
	PayloadSize() int
	PageCount() pagefile.PageID
	Meta() pagefile.Meta
	Read(id pagefile.PageID) (pagefile.PageType, []byte, error)
	Write(id pagefile.PageID, typ pagefile.PageType, payload []byte) error
	Allocate() (pagefile.PageID, error)
	Free(id pagefile.PageID) error
	FreeRanges() []pagefile.Range
	// prepare is PrepareCheckpoint; the returned function is
	// CommitCheckpoint of the prepared checkpoint.
	prepare(u pagefile.MetaUpdate) (commit func() error, err error)
}

// filePager adapts *pagefile.File to pager.
type filePager struct {
	*pagefile.File
}

func (f filePager) prepare(u pagefile.MetaUpdate) (func() error, error) {
	cp, err := f.PrepareCheckpoint(u)
	if err != nil {
		return nil, err
	}
	return func() error { return f.CommitCheckpoint(cp) }, nil
}
