"""SeaweedFS's S3 gateway as the tests' real S3-compatible server (see README.md)."""
