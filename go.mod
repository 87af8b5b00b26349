module github.com/kdb-project/kdb

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/btree v1.1.3 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
