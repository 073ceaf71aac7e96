"""The rewards of the papers, one function per equation (plain floats and arrays in)."""
