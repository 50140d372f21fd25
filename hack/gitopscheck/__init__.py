"""What Flux (kstatus) and Argo CD (gopher-lua) say of a DocParser, by their own code."""
