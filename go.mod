module github.com/kdb-project/kdb

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/google/btree v1.1.3
	golang.org/x/sys v0.50.0
)
