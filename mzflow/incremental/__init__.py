"""incremental/"""
