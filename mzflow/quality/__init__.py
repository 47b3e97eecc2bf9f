"""quality/"""
