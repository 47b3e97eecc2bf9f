"""storage/"""
