// Package lint holds checks on the source tree that run as tests: the import
// layering of STYLE.md §1 and the root module's dependency list.
package lint
