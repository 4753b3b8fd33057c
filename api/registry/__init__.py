"""The pack registry: publishers and their signing keys, publishing, pack versions, blobs."""
